/*
 * job_harness.h - the world around one coordinator job for the unit tests
 * (test_job.c, test_job_recover.c): a fake membership source, a fake post
 * office in place of the server (each connection is a mailbox) and a
 * clock the test moves; helpers that drive the job as real workers would.
 */
#ifndef RS_TESTS_JOB_HARNESS_H
#define RS_TESTS_JOB_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/config.h"
#include "common/proto.h"
#include "coordinator/job.h"

#include <stdio.h>

#define WORKERS 1100 /* test_job_scale.c: a world of 1,024 that grows to 1,100 */
#define MAX_MAIL 256
#define NTABLES 2 /* examples/minimal.json */

#define PUBLISHED_KEPT 16 /* status messages the harness keeps (published()) */

typedef struct mailbox {
	json_t *msg[MAX_MAIL];
	int n;
} mailbox;

/* The world around one job. */
typedef struct job_harness {
	double now;
	rs_config *cfg;
	rs_job *job;
	rs_server_handler h;
	rs_job_options o;
	FILE *report;
	/* the membership source */
	int32_t replicas;
	int scales, ending, save_fails;
	int api_down;           /* saves fail as an unreachable API server's do (RS_ECURL) */
	int save_refused;       /* saves fail as one refused for good does (RS_EINVAL: a 413) */
	int save_tries, impatient; /* saves asked for; how many of them were impatient */
	rs_state_phase saved[64];
	int nsaved;
	json_t *state;          /* the last state saved */
	json_t *plan;           /* its plan */
	char event[256];
	/* the post office: one mailbox per worker connection (index WORKERS: rowshiftctl) */
	mailbox box[WORKERS + 1];
	int published;
	json_t *pub[PUBLISHED_KEPT]; /* the last messages published, pub[(published - 1) % PUBLISHED_KEPT] the newest */
	int held;               /* the status stream held (the job's last word on it) */
} job_harness;
extern job_harness H;

extern const rs_job_source source;

rs_conn *conn(int k);
void forget_mail(void);
void set_job(rs_job *j);
int setup(void **state);
int teardown(void **state);
void tick(double dt);
void join(int k);
void join_as(int k, const char *incarnation);
void say(int k, json_t *msg);
json_t *last(int k, rs_msg_type type);
void assert_phase(const char *p);
int reported(const char *text);
/* The newest of the last PUBLISHED_KEPT status messages published whose "type" is `type`, or NULL. */
const json_t *published(const char *type);
int reported_times(const char *text);
json_t *sums(uint64_t a, uint64_t b);
void paused(int k, int64_t gen, int64_t rank, int64_t step, uint64_t a, uint64_t b);
void world_paused(int n);
void staged(int k, int64_t gen, int ok, int has_rows, uint64_t a, uint64_t b);
void create(const rs_job_source *src, int n);
void start(int n);
void to_migrating(int from, int to);
void to_migrating_but(int from, int to, int quiet);
void all_staged(int from, int to, uint64_t skew);
void to_committing(void);
void to_aborting(void);
void restart_coordinator(void);
void assert_recovering(const char *what);
void rejoin_new(int k);
int64_t field(const json_t *m, const char *key);
/* Periodic checkpoints (H.o.ckpt_*): ranks from..to-1 of generation 1's world report their files of step's */
void checkpointed_by(const char *root, int from, int to, int64_t step);
void checkpointed(const char *root, int n, int64_t step); /* every rank of a world of n */
int indexed(const char *root, int64_t step);               /* step's checkpoint is complete (its index written) */
/* A job of 2 workers taking a checkpoint every 10 steps into a scratch folder (root), the newest keep kept. */
void start_checkpointing(char *root, size_t cap, int64_t keep);
/* Sums of the old world's per-table checksums (see to_migrating). */
uint64_t before_sum(int from, int t);

#endif
