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
#include "common/proto.h"
#include "worker/engine.h"
#include "worker/transport.h"

typedef struct rs_trainer rs_trainer;

typedef struct rs_step_stats {
	int64_t step;
	double loss;            /* mean log loss over the global batch */
	double auc;             /* on the evaluation samples, or -1 when not evaluated */
	int pause;              /* some rank asked to pause: every rank stops after this step */
	int checkpoint;         /* some rank asked for a checkpoint: every rank takes it after this step */
	int precopy;            /* every rank is ready to pre-copy (rs_trainer_ready_to_precopy): they start after this step */
	float precopy_rate;     /* the ranks' mean rs_trainer_ask_precopy_rate: the same on every rank */
} rs_step_stats;

/*
 * Ask to pause after the next step. The request rides on the step's loss
 * all-reduce, so every rank learns it in the same step and they all stop at
 * the same boundary (stats.pause).
 */
void rs_trainer_request_pause(rs_trainer *tr);

/* Ask for a checkpoint after the next step: agreed on the same way (stats.checkpoint). */
void rs_trainer_request_checkpoint(rs_trainer *tr);

/*
 * Say this rank is ready to start a pre-copy: the vote rides on the same
 * all-reduce, and stats.precopy is set on every rank at the first step
 * after which all of them are (unanimous: a rank that has not heard of the
 * pre-copy yet must not be waited for in its connect). The vote stands
 * until that step, or until withdrawn (ready 0: the pre-copy was called off).
 */
void rs_trainer_ready_to_precopy(rs_trainer *tr, int ready);

/*
 * The background rounds per step this rank asks for, from its own timings:
 * every rank gets the mean (stats.precopy_rate), so all of them run the
 * same rounds after the same steps.
 */
void rs_trainer_ask_precopy_rate(rs_trainer *tr, float rounds_per_step);

/*
 * A trainer for `rank` of plan's world, talking over t (borrowed; its world
 * must be the plan's), its shards and kernels on `engine` (borrowed; NULL:
 * the CPU). Allocates and initializes this rank's shards.
 */
rs_status rs_trainer_create(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
			    rs_trainer **out, rs_err *err);
/* The same with the shards left unset, for rs_trainer_load to fill (no initial values to compute). */
rs_status rs_trainer_create_for_load(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
				     rs_trainer **out, rs_err *err);
void rs_trainer_destroy(rs_trainer *tr);

/*
 * Train one step (collective: every rank calls it with the same step).
 * stats may be NULL. On failure err (may be NULL) says what failed: the
 * phase of the step ("the lookup's requests (all-to-all)", "table 'ads':
 * ...", a peer's malformed request) followed, when the transport failed,
 * by the transport's own words (rs_transport_error, naming the peer). A
 * failed step leaves the model as the step before left it, ZCH tables
 * included (their changes are taken back where the model may heal; when
 * that cannot be done the trainer is spoiled and cannot heal), except a
 * step whose votes failed, which stays prepared (rs_trainer_catch_up). After
 * a failure the trainer may be destroyed, or kept to heal
 * (rs_trainer_can_heal); the transport is unusable when it was the
 * transport that failed.
 */
rs_status rs_trainer_step(rs_trainer *tr, int64_t step, rs_step_stats *stats, rs_err *err);

/*
 * AUC and mean log loss of the current model on evaluation samples
 * [0, n) (collective). Every rank gets the same figures. Errors are
 * reported as by rs_trainer_step.
 */
rs_status rs_trainer_evaluate(rs_trainer *tr, int64_t n, double *auc, double *logloss, rs_err *err);

/*
 * The AUC of the data source's own teacher on evaluation samples [0, n):
 * the ceiling a model can reach on synthetic data; -1 for real data. Local
 * (not collective).
 */
double rs_trainer_teacher_auc(rs_trainer *tr, int64_t n);

/* ---- the model to and from files (train_ckpt.c) ----------------------------------- */

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
 * A periodic checkpoint, in two halves: rs_trainer_snapshot copies this
 * rank's part (its shards' weights, optimizer state and ZCH identities; on
 * rank 0 the dense network too) at a step boundary, on the training thread
 * (local: no collective); rs_snapshot_write writes the copy's files into an
 * existing directory, each atomically, all fsynced together once the last
 * is written (and the directory after them), touching nothing but the
 * snapshot, so any thread may run it while training goes on. The index is
 * the coordinator's to write, once every rank's files are in place.
 * reuse: an earlier snapshot no longer needed (written, cancelled or
 * failed), or NULL; taken over and freed, its copies' memory used again
 * where the sizes match (mapped already: no page faults while training
 * waits).
 */
typedef struct rs_snapshot rs_snapshot;
rs_status rs_trainer_snapshot(rs_trainer *tr, rs_snapshot *reuse, rs_snapshot **out, rs_err *err);
rs_status rs_snapshot_write(rs_snapshot *s, const char *dir, rs_err *err);
/* After rs_snapshot_write: the files written (names, CRC-32C, sizes; borrowed from s) and their count. */
int rs_snapshot_files(const rs_snapshot *s, const rs_ckpt_file_report **files);
int64_t rs_snapshot_dense_params(const rs_snapshot *s); /* rank 0's snapshot: the dense network's size; else -1 */
size_t rs_snapshot_bytes(const rs_snapshot *s);         /* memory the copies take */
size_t rs_snapshot_reused(const rs_snapshot *s);        /* of it, what an earlier snapshot's copies had */
void rs_snapshot_free(rs_snapshot *s);
/*
 * Ask a write in flight (any thread) to stop before its next file:
 * rs_snapshot_write then returns RS_EABORTED, the files it wrote removed
 * (none was in place yet).
 */
void rs_snapshot_cancel(rs_snapshot *s);

/*
 * Load a checkpoint written by rs_trainer_save (at any world size and
 * sharding, as long as column blocks match) into this rank's shards and
 * the dense network; *step gets the step it was taken at. Every row of
 * every local shard must be in it exactly once. Errors name the file, the
 * table and what was wrong; the trainer's contents are then undefined
 * (destroy it). ZCH tables get their identities and eviction metadata
 * back, bucket by bucket. Local.
 */
rs_status rs_trainer_load(rs_trainer *tr, const char *dir, int64_t *step, rs_err *err);

/* ---- live resharding (reshard.c) ------------------------------------------------- */

/*
 * What a reshard is: from old_plan to new_plan over `uni`, a transport over
 * the union of the old and the new members. Union ranks 0..W-1 are the new
 * world's ranks (new rank = union rank); union ranks W.. are members that
 * leave. union_of_old[r] is the union rank of the member that was rank r of
 * the old world (every old member is in the union: it either stays or
 * drains), or -1 for a member lost with its rows (healing a 2D world: the
 * rows come from their copies in other replica groups). Members of the
 * union that were not in the old world are joining.
 */
typedef struct rs_reshard_spec {
	const rs_plan *old_plan, *new_plan;
	const int32_t *union_of_old; /* old_plan->world.ranks entries */
	rs_transport *uni;
	rs_transport *train_t;       /* the new world's transport (rs_transport_subset of uni), NULL when leaving */
	rs_engine *engine;           /* the new trainer's engine; NULL: the old trainer's (the CPU for a joiner) */
	size_t chunk_bytes;          /* the largest chunk of rows sent at once; 0: RS_RESHARD_CHUNK_BYTES */
	/*
	 * Partial recovery: the checkpoint that rows lost with every copy come
	 * back from (NULL: such rows fail the plan diff), and where the counted
	 * checksum of the rows this member restored goes per table (NULL: not
	 * wanted; zeroed first).
	 */
	const char *restore;
	uint64_t *restored;
	/*
	 * Called after each round when not NULL: sent[u] is what this member has
	 * sent to union rank u so far, total[u] what it will have sent (payload
	 * bytes, as the plan diff counts them), npeers the union's size.
	 */
	void (*progress)(void *ctx, const uint64_t *sent, const uint64_t *total, int32_t npeers);
	void *progress_ctx;
} rs_reshard_spec;

#define RS_RESHARD_CHUNK_BYTES ((size_t)8 << 20)

/* What one member's part of a reshard did and cost. */
typedef struct rs_reshard_stats {
	uint64_t sent_bytes, recv_bytes; /* rows with optimizer state and ZCH identities (the plan diff's measure) */
	uint64_t wire_bytes;             /* everything this member sent: rows, checksums, bucket headers, dense */
	uint64_t kept_bytes;             /* rows copied locally from the old shards */
	int64_t chunks_sent, chunks_recv;
	int64_t restored_rows;           /* rows loaded from spec->restore (ZCH tables: slots) */
	int rounds;
	double copy_s;                   /* preparing the new shards: kept rows shared or copied, pages faulted in */
	double move_s;                   /* the chunk rounds (send, receive, verify) and the dense network */
	/* pre-copy (rs_precopy_*): what moved while training went on, and what was sent again at the pause */
	int background_rounds;           /* rounds run before rs_precopy_finish */
	uint64_t resent_rows, resent_bytes; /* rows sent again by the passes after the rounds (updated since sent) */
	uint64_t dirty_rows, dirty_bytes; /* rows sent again at the pause (updated after they were sent), and their bytes */
} rs_reshard_stats;

/*
 * Phase one of a reshard, on every member of the union: build the trainer
 * of new_plan for this member (NULL when it leaves) and fill it. A new
 * shard made entirely of rows it keeps shares the old shard's memory (the
 * incremental planner cuts kept rows into shards of their own, so this is
 * the common case: nothing copied); other kept rows are copied from `old`
 * (NULL for a joining member); rows that move
 * travel in rounds of chunks of at most chunk_bytes with a CRC-32C each,
 * straight from the old shards to the new ones (ZCH buckets serialized with
 * their identities and eviction metadata), so staging needs no memory
 * beyond the new shards and one chunk per peer; joining members get the
 * dense network from the member that was old rank 0. A chunk whose checksum
 * does not match fails the call with RS_ECORRUPT naming the table, the rows
 * and the sender; a dead or silent peer fails it with RS_EPEER or
 * RS_ETIMEDOUT. `old` is never modified, so on any failure the old model
 * is intact: destroy *out (abort) or rs_trainer_commit it. *out borrows
 * from `old` until then.
 */
rs_status rs_trainer_stage(const rs_config *cfg, const rs_trainer *old, const rs_reshard_spec *spec,
			   rs_trainer **out, rs_reshard_stats *stats, rs_err *err);

/*
 * Pre-copy: phase one while the old world trains on. rs_precopy_begin sets
 * up what rs_trainer_stage does (the new trainer, the rows kept, the
 * chunks) for the plain tables' moves and starts marking the old shards'
 * rows as they are updated; then every member of the union runs
 * rs_precopy_round until rs_precopy_pending is 0 (an old member once or a
 * few times between steps, a joiner back to back: each round is an
 * exchange over the union, so every member runs the same rounds in the
 * same order): the chunk rounds, then two passes that send again the rows
 * updated since they were sent. At the pause, rs_precopy_finish runs the
 * rounds left, sends again every row updated after it was sent (with its row numbers and one
 * CRC-32C per peer), copies again the kept rows that were copied and
 * updated since, then moves the ZCH tables (their identities change with
 * every lookup), the data-parallel ones (one old copy may feed several
 * joiners) and the dense network as rs_trainer_stage does: *out is
 * then what rs_trainer_stage would have built at that moment, to commit or
 * destroy. `old` is never modified but for the marks (the training step
 * sets them): on any failure rs_precopy_free leaves it as it was, training.
 * Not for partial recovery (spec->restore) or 2D worlds whose replicas are
 * averaged every K steps (the average changes every row): RS_EINVAL, and
 * those reshard with rs_trainer_stage at the pause. On the CUDA engine the
 * rounds read and write shard memory from the host between steps, as the
 * reshard at the pause does (engine.h: every engine call has returned). The
 * spec is copied; what it points to (plans, union_of_old, transports,
 * progress_ctx) must outlive the rs_precopy.
 */
typedef struct rs_precopy rs_precopy;

/* Whether this trainer's rows can be pre-copied: a 1D world, or 2D with exact sync (either engine). */
int rs_trainer_can_precopy(const rs_trainer *tr);

rs_status rs_precopy_begin(const rs_config *cfg, rs_trainer *old, const rs_reshard_spec *spec, rs_precopy **out,
			   rs_err *err);
int64_t rs_precopy_pending(const rs_precopy *pc);
/* Whether only the last pass is left (the chunk rounds and the other passes are done). */
int rs_precopy_last_pass_left(const rs_precopy *pc);
rs_status rs_precopy_round(rs_precopy *pc, rs_err *err);
rs_status rs_precopy_finish(rs_precopy *pc, rs_trainer **out, rs_reshard_stats *stats, rs_err *err);
void rs_precopy_free(rs_precopy *pc);

/*
 * Phase two: `staged` (from rs_trainer_stage) takes over what it borrowed
 * from `old` (the data source, the memory of the rows it kept), `old` is
 * destroyed, and the memory that held the rows that moved away goes back
 * to the system: on a thread, a slice after each of staged's steps.
 * old may be NULL.
 */
void rs_trainer_commit(rs_trainer *staged, rs_trainer *old);

/*
 * Whether this trainer can go on after its last step failed on a lost peer:
 * its failed step changed nothing (rs_trainer_step updates only after its
 * last collective), and the world is 2D with exact replica sync (a copy of
 * every lost row lives on in another replica group; with partial recovery
 * rows with none left come back from a checkpoint) or 1D with partial
 * recovery asked for.
 */
int rs_trainer_can_heal(const rs_trainer *tr);

/*
 * A step's last exchange is its votes' all-reduce: a rank that gets its
 * result knows every rank came through every other exchange of the step,
 * and a rank whose votes failed holds everything the step's updates need.
 * It keeps the step prepared: when the world goes on from that step (a
 * survivor finished it, or every role can catch up to it),
 * rs_trainer_catch_up makes its updates. rs_trainer_prepared: the count of
 * steps done catching up reaches, or 0 when there is nothing to catch up.
 */
int64_t rs_trainer_prepared(const rs_trainer *tr);
rs_status rs_trainer_catch_up(rs_trainer *tr, rs_err *err);

/*
 * The world goes on from the step before the prepared one: drop it, and
 * take back what its lookup changed in the ZCH tables, so that the model
 * is the last step's (the next rs_trainer_step does the same for a step
 * still prepared). RS_ENOMEM (the trainer spoiled) when those changes
 * could not all be kept.
 */
rs_status rs_trainer_drop_prepared(rs_trainer *tr, rs_err *err);

/*
 * "Nothing lost or duplicated": per_table[t] (cfg->ntables entries) gets
 * the wrapping sum, over the rows this rank counts, of a 64-bit hash of
 * (table, global row, column offset, the row's weights and optimizer state
 * bytes, its ZCH ID and eviction metadata) (a fast multiply-xor hash, not a CRC). A rank counts its replica-0 shards, and a
 * data-parallel table only on rank 0, so summed over all ranks each table's
 * figure covers every row once and does not depend on the sharding: it is
 * the same before and after a correct reshard. Local (not collective).
 */
void rs_trainer_checksum(const rs_trainer *tr, uint64_t *per_table);

/*
 * Both in one pass over the rows: counted as rs_trainer_checksum; held
 * over every shard this rank holds, whatever its replica group,
 * data-parallel tables included (in a 2D world with exact sync the holders
 * of one role, the same shards in every group, report the same figures,
 * which the coordinator checks before it rebuilds a lost member from
 * them). Either may be NULL.
 */
void rs_trainer_checksums(const rs_trainer *tr, uint64_t *counted, uint64_t *held);

/*
 * Tests only: 1: the first chunk this process receives lands with a bit
 * flipped, before the transport hashes it (rs_transport_damage_for_tests);
 * 2: the dense network a joiner receives is damaged before it is checked.
 */
extern int rs_reshard_fault_for_tests;
/* Tests only: a checkpoint's writer waits this long (ms) after its first file, a window to kill it mid-write;
 * only the checkpoint of rs_checkpoint_stall_step_for_tests where that is >= 0. */
extern int64_t rs_checkpoint_stall_ms_for_tests;
extern int64_t rs_checkpoint_stall_step_for_tests;
/* Tests only: the disk speed (bytes/s) a final save's ranks allow the whole model (default 10 MiB/s). */
extern int64_t rs_save_floor_bytes_per_s_for_tests;

#endif
