/*
 * later.c - the work a reshard's commit need not hold the pause for (see
 * rs__later in train_internal.h): freeing the old trainer's large arrays
 * and the pre-copy's hashes, unmapping blocks no shard holds any more,
 * and giving the pages of rows that moved away back to the system.
 * Measured at the pause of a 4 GiB reshard on this machine, it took 10-20
 * ms, growing with the state. The commit lists that work, and a thread of
 * its own does it while training resumes. Only the host's memory goes
 * there (another engine's calls stay on the thread that owns them), and
 * nothing else touches it: the rows are gone from every shard. Freeing a
 * block whose unused pages the thread gives back could race it; that
 * comes only after the trainer holding the block is destroyed, which
 * waits for the thread first (rs__later_wait).
 *
 * The thread is paced by the owner's steps: it starts after the first
 * step since the commit (or rs__later_wait_s without one), and gives back
 * about SLICE bytes a step. Given back at once, in 4 KiB pages, the pages
 * freed made the first step after a 4 GiB reshard up to twice as long as
 * after a 256 MiB one on this 2-core machine (a thread of the lowest
 * priority did no better: unmapping interrupts every thread of the
 * process to flush its TLB). Paced, the memory stays taken a step, or
 * rs__later_wait_s without one, a slice. Spans, blocks and malloc'd
 * arrays (a word per row, the hashes: tens of MiB at 4 GiB of state) are
 * all cut in slices. Another reshard staging beside
 * the owner first has the rest done at once (rs__stage_open).
 */
#include "worker/train_internal.h"
#include "common/grow.h"
#include "common/log.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLICE RS__LATER_SLICE

double rs__later_wait_s = 0.1;

enum { FREE, RELEASE, UNMAP };

struct rs__later {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t stepped;
	unsigned long steps; /* the owner's steps since the commit (mu) */
	int hurry;           /* the owner waits for the thread: no more pacing (mu) */
	struct job {
		int kind;
		rs_engine *engine; /* RELEASE, UNMAP */
		void *p;
		size_t len;
	} *v;
	size_t n, cap;
};

rs__later *rs__later_new(void)
{
	rs__later *l = calloc(1, sizeof(rs__later));
	pthread_condattr_t ca;
	int ok = 0;
	if (l && pthread_condattr_init(&ca) == 0) {
		ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&l->stepped, &ca) == 0;
		pthread_condattr_destroy(&ca);
	}
	if (ok && pthread_mutex_init(&l->mu, NULL) != 0) {
		pthread_cond_destroy(&l->stepped);
		ok = 0;
	}
	if (!ok) {
		free(l);
		return NULL; /* the jobs are done at once */
	}
	return l;
}

/*
 * Job j's bytes [from, to), of the host's memory or another engine's (then
 * all at once: from 0 to len); `last`: its last part. A malloc'd array's
 * whole pages go back part by part (partial pages stay: the allocator's
 * words beside the array may share them), and it is freed with its last
 * part.
 */
static void run_part(const struct job *j, size_t from, size_t to, int last)
{
	if (j->kind == FREE) {
		rs_engine *host = rs_engine_cpu();
		host->ops->release(host, (char *)j->p + from, to - from);
		if (last)
			free(j->p);
	} else if (j->kind == RELEASE) {
		j->engine->ops->release(j->engine, (char *)j->p + from, to - from);
	} else {
		j->engine->ops->free(j->engine, (char *)j->p + from, to - from);
	}
}

static void run(const struct job *j)
{
	if (j->kind == FREE)
		free(j->p); /* at once: nothing to give back first */
	else
		run_part(j, 0, j->len, 1);
}

/* List a job, or do it now: without a list, for another engine than the host's, or when the list cannot grow. */
static void add(rs__later *l, struct job j)
{
	if (l && (j.kind == FREE || j.engine == rs_engine_cpu()) &&
	    rs_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v)) == RS_OK) {
		l->v[l->n++] = j;
		return;
	}
	run(&j);
}

void rs__later_free(rs__later *l, void *p)
{
	if (p)
		add(l, (struct job){FREE, NULL, p, 0});
}

void rs__later_release(rs__later *l, rs_engine *e, void *p, size_t len) { add(l, (struct job){RELEASE, e, p, len}); }

void rs__later_mem_unref(rs__later *l, rs__mem *m)
{
	if (!m || --m->refs > 0)
		return;
	add(l, (struct job){UNMAP, m->engine, m->base, m->len});
	free(m);
}

/* Wait for the owner's next step after the `*seen`th (rs__later_wait_s at most, none once it hurries). */
static void next_step(rs__later *l, unsigned long *seen)
{
	struct timespec until;
	if (clock_gettime(CLOCK_MONOTONIC, &until) != 0) { /* cannot fail with this clock: on without waiting */
		*seen = l->steps; /* unlocked: a stale count only paces less */
		return;
	}
	until.tv_sec += (time_t)rs__later_wait_s;
	until.tv_nsec += (long)((rs__later_wait_s - (double)(time_t)rs__later_wait_s) * 1e9);
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&l->mu);
	while (!l->hurry && l->steps <= *seen)
		if (pthread_cond_timedwait(&l->stepped, &l->mu, &until) != 0)
			break; /* ETIMEDOUT: on without it */
	*seen = l->steps;
	pthread_mutex_unlock(&l->mu);
}

/* The jobs, about SLICE bytes a step: a span is cut where SLICE divides its address (whole pages, as one call gave back). */
static void *work(void *arg)
{
	rs__later *l = arg;
	unsigned long seen = 0;
	size_t spent = SLICE; /* given back since the last step: the first part waits for one */
	for (size_t i = 0; i < l->n; i++) {
		const struct job *j = &l->v[i];
		size_t len = j->kind == FREE ? malloc_usable_size(j->p) : j->len, at = 0;
		do {
			if (spent >= SLICE) {
				next_step(l, &seen);
				spent = 0;
			}
			size_t to = len, cut = SLICE - ((uintptr_t)j->p + at) % SLICE;
			if (len - at > cut)
				to = at + cut; /* only the host's memory is listed: any page-aligned part of it may go alone */
			run_part(j, at, to, to == len);
			spent += to - at;
			at = to;
		} while (at < len);
	}
	return NULL;
}

static void later_free(rs__later *l)
{
	if (!l)
		return;
	pthread_cond_destroy(&l->stepped);
	pthread_mutex_destroy(&l->mu);
	free(l->v);
	free(l);
}

void rs__later_now(rs__later *l)
{
	if (!l)
		return;
	l->hurry = 1;
	work(l);
	later_free(l);
}

void rs__later_start(rs__later *l, rs_trainer *owner)
{
	if (!l)
		return;
	rs__later_wait(owner); /* one at a time */
	int e = l->n ? pthread_create(&l->thread, NULL, work, l) : -1;
	if (e == 0) {
		owner->later = l;
		return;
	}
	if (l->n)
		RS_WARN("no thread to free the old model's memory (%s): freeing it here", strerror(e));
	rs__later_now(l);
}

rs__later *rs__trainer_later(rs_trainer *tr)
{
	if (!tr->pending)
		tr->pending = rs__later_new();
	return tr->pending;
}

void rs__later_stepped(rs_trainer *tr)
{
	rs__later *l = tr->later;
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->steps++;
	pthread_cond_signal(&l->stepped);
	pthread_mutex_unlock(&l->mu);
}

void rs__later_wait(rs_trainer *tr)
{
	if (!tr || !tr->later)
		return;
	pthread_mutex_lock(&tr->later->mu);
	tr->later->hurry = 1;
	pthread_cond_signal(&tr->later->stepped);
	pthread_mutex_unlock(&tr->later->mu);
	int e = pthread_join(tr->later->thread, NULL);
	if (e != 0) /* only a bug could: the thread is joinable and not this one */
		RS_WARN("waiting for the old model's memory to be freed: %s", strerror(e));
	later_free(tr->later);
	tr->later = NULL;
}
