/*
 * proto.h - the control protocol's messages (see README, "Control
 * protocol"): parsing JSON text into a typed message, and validating each
 * message type against its fixed schema (unknown keys are errors). Both the
 * coordinator and the worker read messages through here, and the fuzz
 * target drives it with arbitrary bytes.
 *
 * The structs borrow strings and JSON values from the message: they are
 * valid while the message is.
 */
#ifndef RS_PROTO_H
#define RS_PROTO_H

#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

/* Parse a message: a JSON object with a string "type". *out gets a new reference. */
rs_status rs_proto_parse(const char *text, size_t len, json_t **out, const char **type, rs_err *err);

/* The "type" of a message, or "(untyped)": borrowed from msg. */
const char *rs_proto_type(const json_t *msg);

typedef struct rs_msg_join {
	const char *token, *worker, *addr;
	int64_t pid;
	const char *incarnation; /* one random value per process, the same on its every join: "" when absent */
} rs_msg_join;

typedef struct rs_msg_start {
	int64_t generation, rank, world, first_step, steps, eval_every, eval_samples;
	int64_t union_world;  /* members connected for this generation: world, or more while some leave */
	json_t *peers;        /* array of "host:port", one per union rank */
	json_t *plan;         /* a plan (common/plan.h JSON), validated by its reader */
	json_t *previous_plan; /* the plan rows move from (a reshard), or NULL for a fresh start */
	json_t *union_of_old;  /* a reshard: per old rank, its union rank (an array of distinct ints) */
	const char *save;     /* checkpoint directory, or NULL */
	const char *load;     /* a fresh start: the checkpoint to load first (its step is first_step), or NULL */
	int last;             /* training ends at `steps` (else the worker pauses there) */
} rs_msg_start;

/* A worker stopped at a step boundary, listening for the next generation on addr. */
typedef struct rs_msg_paused {
	int64_t rank, generation, step;
	const char *addr;
	json_t *checksum;     /* per table, its rows' checksum (rs_proto_checksums), or NULL */
} rs_msg_paused;

/* A member of a reshard's union finished staging (phase one), well or not. */
typedef struct rs_msg_staged {
	int64_t generation;   /* the attempt */
	int ok;
	const char *reason;   /* why not, when !ok */
	json_t *checksum;     /* ok and in the new world: per table, the staged rows' checksum; else NULL */
	int64_t sent_bytes, recv_bytes, wire_bytes, kept_bytes;
	double connect_s, copy_s, move_s;
} rs_msg_staged;

/* {"type":"resume","generation","steps","last"}: go on training this generation from where it paused. */
typedef struct rs_msg_resume {
	int64_t generation, steps;
	int last;
} rs_msg_resume;

typedef struct rs_msg_progress {
	int64_t rank, step;
	double loss, samples_per_s, auc; /* auc < 0 when not evaluated */
	double teacher_auc;              /* synthetic data's ceiling, once, from rank 0; < 0 when absent */
} rs_msg_progress;

rs_status rs_proto_join(json_t *msg, rs_msg_join *out, rs_err *err);
rs_status rs_proto_start(json_t *msg, rs_msg_start *out, rs_err *err);
rs_status rs_proto_progress(json_t *msg, rs_msg_progress *out, rs_err *err);
rs_status rs_proto_paused(json_t *msg, rs_msg_paused *out, rs_err *err);
rs_status rs_proto_staged(json_t *msg, rs_msg_staged *out, rs_err *err);
rs_status rs_proto_resume(json_t *msg, rs_msg_resume *out, rs_err *err);

/*
 * {"type":"migrating","generation","sent":[[union rank, bytes sent so far], ...]}:
 * a sender's progress during staging. *sent borrows the array; its entries are checked.
 */
rs_status rs_proto_migrating(json_t *msg, int64_t *generation, json_t **sent, rs_err *err);

/* {"type":"idle","addr"}: a worker outside the world (a joiner after an aborted reshard) listening anew. */
rs_status rs_proto_idle(json_t *msg, const char **addr, rs_err *err);

/*
 * The messages that carry a generation and little else: "commit", "abort"
 * (+ "reason"), "committed", "staging", "training" (+ "step"), "leave"
 * (+ "reason", no generation). *reason and *step are optional outputs
 * (NULL, -1 when absent). RS_EINVAL when msg is not such a message of its type.
 */
rs_status rs_proto_generation(json_t *msg, int64_t *generation, int64_t *step, const char **reason, rs_err *err);

/* Per-table checksums as JSON: an array of 16-digit hex strings. A new reference, NULL without memory. */
json_t *rs_proto_checksums_to_json(const uint64_t *v, int n);

/* Read n checksums written by rs_proto_checksums_to_json; RS_EINVAL when the array is not exactly that. */
rs_status rs_proto_checksums(const json_t *arr, uint64_t *out, int n, rs_err *err);

#endif
