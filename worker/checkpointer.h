/*
 * checkpointer.h - a worker's periodic checkpoints, written off the
 * training thread. At a checkpoint step the agent copies this rank's part
 * (rs_trainer_snapshot, on the training thread, between two steps) and
 * hands the copy over; a thread of its own writes the files into
 * ROOT/step-NNNNNNNNN/ (created as needed, mode 0700), each atomically,
 * all fsynced together, then the directory and its name in ROOT, while
 * training goes on. When the files are in place the agent
 * reports them ("checkpointed", with each file's CRC-32C) and the
 * coordinator writes the index once every rank has: a checkpoint without
 * its index is incomplete and never read.
 *
 * One write at a time: starting the next waits for the one before (the
 * agent collects its report first). Single-owner: every call comes from the
 * agent's thread.
 */
#ifndef RS_CHECKPOINTER_H
#define RS_CHECKPOINTER_H

#include "common/status.h"
#include "worker/train.h"

#include <jansson.h>

typedef struct rs_checkpointer rs_checkpointer;

rs_status rs_checkpointer_create(rs_checkpointer **out, rs_err *err);

/*
 * Stop the write in flight before its next file (its generation is lost:
 * the checkpoint would never complete). rs_checkpointer_done then gives
 * RS_EABORTED.
 */
void rs_checkpointer_cancel(rs_checkpointer *c);

/*
 * Write s (taken over: kept once written, as the spare) for (generation, step, rank)
 * under root. The previous write must have been collected (rs_checkpointer_done
 * with wait); RS_EINVAL otherwise (a bug). RS_ESYS when no thread can be started (s is then freed).
 */
rs_status rs_checkpointer_start(rs_checkpointer *c, rs_snapshot *s, const char *root, int64_t generation,
				int64_t step, int64_t rank, rs_err *err);

/*
 * The finished write, if any (with wait: the one in flight, once it ends):
 * RS_OK with *report the "checkpointed" message to send (a new reference;
 * NULL when nothing finished), or the write's error (in err, naming the
 * checkpoint). RS_ENOMEM when the report cannot be built.
 */
rs_status rs_checkpointer_done(rs_checkpointer *c, int wait, json_t **report, rs_err *err);

/*
 * The snapshot of the last write collected (the caller's now), or NULL: for
 * rs_trainer_snapshot to copy the next checkpoint into. Kept until then, so
 * between checkpoints a rank holds a copy of its part, the memory a write
 * takes anyway.
 */
rs_snapshot *rs_checkpointer_spare(rs_checkpointer *c);

/*
 * Let go of the spare: when the shards' sizes change (a reshard stages
 * beside the old model, or the model goes), nothing of it would be
 * reused, and before the final save, which needs memory of its own.
 */
void rs_checkpointer_drop_spare(rs_checkpointer *c);

/* Whether a write is in flight (started and not collected). */
int rs_checkpointer_busy(const rs_checkpointer *c);

/* Waits for a write in flight (its result is dropped) and frees c. */
void rs_checkpointer_destroy(rs_checkpointer *c);

#endif
