/*
 * proto.h - the control protocol (see README, "Control protocol"): every
 * message type, its builder and its parser side by side. The coordinator,
 * the worker and rowshiftctl build and read messages only through here:
 * a builder makes exactly what its parser accepts, parsers validate each
 * message against its fixed schema (unknown keys are errors), and the
 * fuzz target drives the parsers with arbitrary bytes.
 *
 * Builders return a new reference, or NULL without memory; JSON values they
 * are given are borrowed (the message takes its own reference). Parsed
 * structs borrow strings and JSON values from the message: they are valid
 * while the message is.
 */
#ifndef RS_PROTO_H
#define RS_PROTO_H

#include "common/limits.h"
#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

/* Every message type. */
typedef enum rs_msg_type {
	RS_MSG_UNKNOWN = 0, /* a type this protocol does not have */
	/* worker (or rowshiftctl) -> coordinator */
	RS_MSG_JOIN,
	RS_MSG_STAGING,
	RS_MSG_STAGED,
	RS_MSG_MIGRATING,
	RS_MSG_COMMITTED,
	RS_MSG_PAUSED,
	RS_MSG_TRAINING,
	RS_MSG_PROGRESS,
	RS_MSG_DONE,
	RS_MSG_IDLE,
	RS_MSG_LEAVE,
	RS_MSG_SCALE,
	RS_MSG_CHECKPOINTED,
	RS_MSG_PRECOPIED,
	/* coordinator -> worker (or rowshiftctl) */
	RS_MSG_WELCOME,
	RS_MSG_REFUSED,
	RS_MSG_START,
	RS_MSG_COMMIT,
	RS_MSG_ABORT,
	RS_MSG_RESUME,
	RS_MSG_PAUSE,
	RS_MSG_STOP,
	RS_MSG_SCALING,
	RS_MSG_ERROR,
	RS_MSG_CHALLENGE,
	RS_MSG_FINISH,
	RS_MSG_CATCH_UP,
	RS_MSG_TYPE_COUNT
} rs_msg_type;

/* Parse a message: a JSON object with a string "type". *out gets a new reference. */
rs_status rs_proto_parse(const char *text, size_t len, json_t **out, const char **type, rs_err *err);

/* The "type" of a message, or "(untyped)": borrowed from msg. */
const char *rs_proto_type(const json_t *msg);

/* The type of a message (RS_MSG_UNKNOWN for an unknown or missing "type"), and a type's name. */
rs_msg_type rs_proto_kind(const json_t *msg);
const char *rs_proto_type_name(rs_msg_type t);

/*
 * The control protocol's version, in every join (and its proof): a
 * coordinator refuses a joiner of another version, with a refusal it signs,
 * so that workers and coordinators of different rowshift versions (a
 * rolling upgrade half done) never train together. A join without one is
 * of version 0 (from before joins carried it).
 */
#define RS_PROTOCOL_VERSION 3 /* 2: joins carry the model config's digest; 3: "done" its generation */

/*
 * The join handshake (common/auth.h): the coordinator opens every control
 * connection with a challenge (its nonce and its epoch); the joiner answers
 * with a join carrying its own nonce and a proof that it holds the join
 * token, bound to both nonces, the epoch and what it announces; the
 * coordinator answers welcome or refused with its own proof, so the joiner
 * knows it reached the coordinator and not an impostor. The token itself
 * never crosses the wire.
 */
typedef struct rs_msg_join {
	const char *worker, *addr;
	int64_t pid;
	int64_t protocol;        /* RS_PROTOCOL_VERSION of the joiner's build; 0 when absent */
	const char *incarnation; /* one random value per process, the same on its every join: "" when absent */
	const char *model;       /* a worker's rs_config_digest; "" when absent (a tool such as rowshiftctl) */
	const char *nonce;       /* the joiner's, fresh for this join */
	const char *proof;       /* rs_proto_join_proof */
} rs_msg_join;

/* The coordinator's answer to a join or a request (rs_proto_reply). */
typedef struct rs_msg_reply {
	rs_msg_type type;        /* welcome, refused, error or scaling */
	const char *reason;      /* refused, error */
	const char *proof;       /* welcome, refused: the coordinator's proof, or NULL */
	int64_t workers;         /* scaling */
} rs_msg_reply;

typedef struct rs_msg_start {
	int64_t generation, rank, world, first_step, steps, eval_every, eval_samples;
	int64_t union_world;  /* members connected for this generation: world, or more while some leave */
	json_t *peers;        /* array of "host:port", one per union rank */
	/*
	 * The plan (common/plan.h JSON, validated by its reader), and the plan
	 * rows move from (a reshard; NULL for a fresh start). On the wire each
	 * is a zjson string (common/zjson.h; the coordinator deflates a plan
	 * once for every member, about 8 times smaller) or the object itself;
	 * rs_proto_start gives the objects.
	 */
	json_t *plan;
	json_t *previous_plan;
	json_t *union_of_old;  /* a reshard: per old rank, its union rank (an array of distinct ints) */
	const char *save;     /* checkpoint directory, or NULL */
	const char *load;     /* a fresh start: the checkpoint to load first (its step is first_step), or NULL */
	const char *restore;  /* a reshard (partial recovery): the checkpoint rows lost with every copy come from */
	const char *checkpoint_dir; /* periodic checkpoints go under it (step-NNNNNNNNN/), or NULL */
	int64_t checkpoint_every;   /* ... at every step that is a multiple of it (0: none) */
	int64_t checkpoint_interval; /* ... and at the first step after this many seconds since the last (0: none) */
	int last;             /* training ends at `steps` (else the worker pauses there) */
	/*
	 * A reshard pre-copied (worker/precopy.c): the old members start moving
	 * rows while they train (at a step they agree on), the joiners at once;
	 * each says "precopied" when its background rounds are done, and the
	 * rest happens on "finish", which names the step the new generation
	 * starts at (first_step and steps here are only the coordinator's view
	 * when it began).
	 */
	int precopy;
} rs_msg_start;

/* A worker stopped at a step boundary, listening for the next generation on addr. */
typedef struct rs_msg_paused {
	int64_t rank, generation, step;
	const char *addr;
	json_t *checksum;     /* per table, its rows' checksum (rs_proto_checksums), or NULL */
	json_t *held;         /* 2D: per table, the checksum of every copy it holds (rs_trainer_checksum_held), or NULL */
	int64_t prepared;     /* the step it can catch up to (rs_trainer_prepared), 0: none */
	double stopped_s;     /* how long it had stopped before saying so (its checksums), in [0, 3600] */
} rs_msg_paused;

/* A member of a reshard's union finished staging (phase one), well or not. */
typedef struct rs_msg_staged {
	int64_t generation;   /* the attempt */
	int ok;
	const char *reason;   /* why not, when !ok */
	json_t *checksum;     /* ok and in the new world: per table, the staged rows' checksum; else NULL */
	json_t *restored;     /* ok, partial recovery: per table, the checksum of the counted rows restored; or NULL */
	int64_t restored_rows; /* rows this member loaded from the checkpoint (ZCH: slots) */
	int64_t sent_bytes, recv_bytes, wire_bytes, kept_bytes;
	double connect_s, copy_s, move_s;
	/* pre-copied: rounds it ran while training, and the rows (bytes) it sent again at the pause; 0 otherwise */
	int64_t background_rounds, dirty_rows, dirty_bytes;
} rs_msg_staged;

/*
 * {"type":"finish","generation","first_step","steps","last"}: the world
 * paused at first_step; finish the pre-copied reshard of this generation,
 * which trains from there to steps.
 */
typedef struct rs_msg_finish {
	int64_t generation, first_step, steps;
	int last;
} rs_msg_finish;

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
 * (+ "reason"), "committed", "staging", "precopied", "training" (+ "step",
 * and "addr": where it listens for the next generation, returned in
 * *reason), "leave" (+ "reason", no generation). *reason and *step are
 * optional outputs (NULL, -1 when absent). RS_EINVAL when msg is not such a
 * message of its type.
 */
rs_status rs_proto_generation(json_t *msg, int64_t *generation, int64_t *step, const char **reason, rs_err *err);

/* Per-table checksums as JSON: an array of 16-digit hex strings. A new reference, NULL without memory. */
json_t *rs_proto_checksums_to_json(const uint64_t *v, int n);

/* Read n checksums written by rs_proto_checksums_to_json; RS_EINVAL when the array is not exactly that. */
rs_status rs_proto_checksums(const json_t *arr, uint64_t *out, int n, rs_err *err);

/* One file of a checkpoint a worker wrote: a plain name in the checkpoint's directory, and its CRC-32C. */
typedef struct rs_ckpt_file_report {
	const char *file;
	uint32_t crc32c;
	int64_t bytes;
} rs_ckpt_file_report;

#define RS_PROTO_MAX_CKPT_FILES 65536

/*
 * {"type":"checkpointed","generation","rank","step","files":[{"file","crc32c","bytes"}],
 * "dense_params"?}: a worker's files of the periodic checkpoint at step
 * are written, fsynced and in place (rank 0 also wrote the dense network's,
 * dense_params of them). *files (n of them, borrowed from msg) are
 * checked: plain file names, CRCs of 32 bits.
 */
typedef struct rs_msg_checkpointed {
	int64_t generation, rank, step, dense_params; /* dense_params: -1 when absent */
	rs_ckpt_file_report *files;
	int nfiles;
} rs_msg_checkpointed;

/* Parse (m->files allocated: free it) and build. */
rs_status rs_proto_checkpointed(json_t *msg, rs_msg_checkpointed *m, rs_err *err);
json_t *rs_proto_make_checkpointed(const rs_msg_checkpointed *m);

/*
 * {"type":"done","generation"?,"rank","step"}: training of generation ended
 * at step (the last). *generation is 0 when absent (a worker of protocol
 * 2 sent none; the join refuses one now, and the field stays optional).
 */
rs_status rs_proto_done(json_t *msg, int64_t *generation, int64_t *rank, int64_t *step, rs_err *err);

/* {"type":"scale","workers"}: rowshiftctl asks for 1..RS_MAX_WORKERS workers. */
rs_status rs_proto_scale(json_t *msg, int32_t *workers, rs_err *err);

/* The coordinator's answer to a join or a request: welcome, refused, error or scaling; RS_EINVAL for anything else. */
rs_status rs_proto_reply(json_t *msg, rs_msg_reply *out, rs_err *err);

/*
 * {"type":"challenge","nonce","epoch","term"?}: a nonce and an epoch as
 * auth.h makes them, and the coordinator's term (absent: 0), or RS_EINVAL.
 */
rs_status rs_proto_challenge(json_t *msg, const char **nonce, const char **epoch, int64_t *term, rs_err *err);

/*
 * The epoch the proofs below cover: the challenge's epoch, then "." and the
 * term when it is not 0, so that a term cannot be changed on the way
 * without breaking the proofs. out: at least 64 bytes.
 */
void rs_proto_bound_epoch(const char *epoch, int64_t term, char *out, size_t n);

/*
 * The handshake's proofs: the joiner's (over the challenge's nonce and
 * epoch and everything the join announces), and the coordinator's answer
 * to it (over both nonces, the epoch, the worker and the answer: "welcome",
 * or the refusal's reason). out: RS_AUTH_PROOF_HEX + 1 bytes.
 */
rs_status rs_proto_join_proof(const char *token, const char *challenge, const char *epoch, const rs_msg_join *m,
			      char *out);
rs_status rs_proto_answer_proof(const char *token, const char *challenge, const char *epoch, const rs_msg_join *m,
				const char *answer, char *out);

/* ---- builders ---------------------------------------------------------------- */

json_t *rs_proto_make_challenge(const char *nonce, const char *epoch, int64_t term); /* term 0: none said */
json_t *rs_proto_make_join(const rs_msg_join *m);
json_t *rs_proto_make_welcome(int64_t worker_id, const char *proof);
json_t *rs_proto_make_refused(const char *reason, const char *proof); /* proof may be NULL */
json_t *rs_proto_make_start(const rs_msg_start *m);   /* previous_plan and union_of_old only for a reshard */
json_t *rs_proto_make_paused(const rs_msg_paused *m);
json_t *rs_proto_make_staged(const rs_msg_staged *m); /* counters and times only when ok */
json_t *rs_proto_make_resume(const rs_msg_resume *m);
json_t *rs_proto_make_progress(const rs_msg_progress *m); /* auc, teacher_auc when >= 0 */
json_t *rs_proto_make_idle(const char *addr);
json_t *rs_proto_make_done(int64_t generation, int64_t rank, int64_t step);
json_t *rs_proto_make_scale(int32_t workers);
json_t *rs_proto_make_scaling(int32_t workers);

/* {"type":"migrating","generation","sent":[[union rank, bytes], ...]}: sent (borrowed) as built by the caller. */
json_t *rs_proto_make_migrating(int64_t generation, json_t *sent);

/*
 * A migrating message's "sent": [u, sent[u]] for every union rank u < n
 * with total[u] > 0 (what a sender has sent each peer it sends to). A new
 * reference, NULL without memory.
 */
json_t *rs_proto_migrating_sent(const uint64_t *sent, const uint64_t *total, int32_t n);

/*
 * The generation family (see rs_proto_generation): commit, committed and
 * staging (generation), abort (generation, reason), training and catch_up
 * (generation, step), leave (reason only). reason may be NULL where it is optional.
 */
json_t *rs_proto_make_generation(rs_msg_type type, int64_t generation, int64_t step, const char *reason);
json_t *rs_proto_make_training(int64_t generation, int64_t step, const char *addr);
rs_status rs_proto_finish(json_t *msg, rs_msg_finish *out, rs_err *err);
json_t *rs_proto_make_finish(const rs_msg_finish *m);

/* pause and stop carry nothing; error carries a reason. */
json_t *rs_proto_make_plain(rs_msg_type type);
json_t *rs_proto_make_reason(rs_msg_type type, const char *reason);

#endif
