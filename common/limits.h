/*
 * limits.h - the sizes every layer agrees on, spelled once.
 */
#ifndef RS_LIMITS_H
#define RS_LIMITS_H

/*
 * Workers in one job: the coordinator's members, local mode's replicas,
 * --workers and --schedule, `rowshiftctl scale`, the persisted state and the
 * ranks a start message may name.
 */
#define RS_MAX_WORKERS 4096

/* Samples in one training step, over all workers (a config's train.global_batch). */
#define RS_MAX_GLOBAL_BATCH (1 << 22)

/* Ranks the planner plans for (`rowshiftctl plan --world` may go past a job's workers). */
#define RS_MAX_RANKS 65536

#if RS_MAX_WORKERS > RS_MAX_RANKS
#error "a job's workers must fit in a plan"
#endif

#endif
