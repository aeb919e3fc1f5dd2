/*
 * train.h - one worker's part of synchronous training: its shards, the
 * step, evaluation.
 *
 * A step of global batch G on a world of W ranks: rank r takes samples
 * [step*G + r*G/W, step*G + (r+1)*G/W). For every bag, the IDs go to the
 * ranks that own their rows (one request per column block and owner, an
 * all-to-all), owners pool what they hold and send the partial sums back
 * (a second all-to-all), the requester adds the partials (divided by the
 * bag length for mean pooling); data-parallel tables are looked up locally.
 * The dense network runs on the local samples; its gradient is all-reduced.
 * Embedding gradients travel back along the requests (a third all-to-all)
 * and each owner applies one fused optimizer update per distinct row;
 * data-parallel gradients are all-reduced and applied everywhere. Losses and
 * gradients are sums divided by G, so the result does not depend on W (up
 * to float rounding: sums are grouped differently).
 *
 * Weights start from a function of (seed, table, global row, global column),
 * so a cell has the same initial value whichever rank and shard holds it.
 * ZCH tables receive raw IDs: the requester routes an ID to the owner of its
 * bucket, the owner maps it to a slot (inserting it while training, evicting
 * when full) and a row given to a new ID starts from a function of the ID.
 */
#ifndef RS_TRAIN_H
#define RS_TRAIN_H

#include "common/config.h"
#include "common/plan.h"
#include "worker/transport.h"

typedef struct rs_trainer rs_trainer;

typedef struct rs_step_stats {
	int64_t step;
	double loss;            /* mean log loss over the global batch */
	double auc;             /* on the evaluation samples, or -1 when not evaluated */
	int pause;              /* some rank asked to pause: every rank stops after this step */
} rs_step_stats;

/*
 * Ask to pause after the next step. The request rides on the step's loss
 * all-reduce, so every rank learns it in the same step and they all stop at
 * the same boundary (stats.pause).
 */
void rs_trainer_request_pause(rs_trainer *tr);

/*
 * A trainer for `rank` of plan's world, talking over t (borrowed; its world
 * must be the plan's). Allocates and initializes this rank's shards.
 */
rs_status rs_trainer_create(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_trainer **out,
			    rs_err *err);
void rs_trainer_destroy(rs_trainer *tr);

/* Train one step (collective: every rank calls it with the same step). */
rs_status rs_trainer_step(rs_trainer *tr, int64_t step, rs_step_stats *stats);

/*
 * AUC and mean log loss of the current model on evaluation samples
 * [0, n) (collective). Every rank gets the same figures.
 */
rs_status rs_trainer_evaluate(rs_trainer *tr, int64_t n, double *auc, double *logloss);

/*
 * The AUC of the data source's own teacher on evaluation samples [0, n):
 * the ceiling a model can reach on synthetic data; -1 for real data. Local
 * (not collective).
 */
double rs_trainer_teacher_auc(rs_trainer *tr, int64_t n);

/*
 * Write this rank's shards (fp32 values) and, on rank 0, the dense
 * parameters to `path`: records of {int32 table (-1 for the dense
 * parameters), int32 col_offset, int64 row_offset, int64 rows, int32 cols}
 * followed by rows * cols floats.
 * For tests and tools that compare models across world sizes.
 */
rs_status rs_trainer_dump(const rs_trainer *tr, const char *path);

/*
 * Write a checkpoint of the current model into the existing directory `dir`
 * (see common/checkpoint.h): this rank's shards, and on rank 0 the dense
 * network and the index. Collective: returns once every rank has written.
 */
rs_status rs_trainer_save(rs_trainer *tr, const char *dir, int64_t step, rs_err *err);

/*
 * Move this rank's part of the model from old_plan to new_plan over `uni`,
 * a transport over the union of old and new members (ranks keep their
 * numbers; ranks >= the new world leave, as a StatefulSet scales). Every
 * union member calls it: `old` is NULL for a member joining now, and
 * `train_t` (the new world's transport, typically rs_transport_subset of
 * uni) is NULL for a member leaving. Rows this rank keeps are copied
 * locally; moved rows travel with their optimizer state (ZCH buckets with
 * their identities) and a CRC-32C checked before anything is applied;
 * joining members get the dense network from rank 0. Every member then votes
 * over `uni`: one failure (a checksum mismatch, no memory) makes every member
 * return an error (RS_ECORRUPT where detected, RS_EABORTED elsewhere). On
 * success *out is the trainer for new_plan (NULL when leaving); `old` is
 * left untouched either way, so an aborted reshard keeps the old model.
 */
/* Tests only: when set, every move is corrupted after its checksum is taken. */
extern int rs_reshard_fault_for_tests;

rs_status rs_trainer_reshard(const rs_config *cfg, rs_trainer *old, const rs_plan *old_plan, const rs_plan *new_plan,
			     rs_transport *uni, rs_transport *train_t, rs_trainer **out, rs_err *err);

#endif
