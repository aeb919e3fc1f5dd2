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

typedef struct rs_msg_join {
	const char *token, *worker, *addr;
	int64_t pid;
} rs_msg_join;

typedef struct rs_msg_start {
	int64_t generation, rank, world, first_step, steps, eval_every, eval_samples;
	int64_t union_world;  /* members connected for this generation: world, or more while some leave */
	json_t *peers;        /* array of "host:port", one per union rank */
	json_t *plan;         /* a plan (common/plan.h JSON), validated by its reader */
	json_t *previous_plan; /* the plan rows move from (a reshard), or NULL for a fresh start */
	const char *save;     /* checkpoint directory, or NULL */
	int last;             /* training ends at `steps` (else the worker pauses there) */
} rs_msg_start;

/* A worker stopped at a step boundary, listening for the next generation on addr. */
typedef struct rs_msg_paused {
	int64_t rank, step;
	const char *addr;
} rs_msg_paused;

typedef struct rs_msg_progress {
	int64_t rank, step;
	double loss, samples_per_s, auc; /* auc < 0 when not evaluated */
	double teacher_auc;              /* synthetic data's ceiling, once, from rank 0; < 0 when absent */
} rs_msg_progress;

rs_status rs_proto_join(json_t *msg, rs_msg_join *out, rs_err *err);
rs_status rs_proto_start(json_t *msg, rs_msg_start *out, rs_err *err);
rs_status rs_proto_progress(json_t *msg, rs_msg_progress *out, rs_err *err);
rs_status rs_proto_paused(json_t *msg, rs_msg_paused *out, rs_err *err);

#endif
