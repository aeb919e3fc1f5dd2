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
 */
#include "worker/train_internal.h"
#include "common/grow.h"
#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { FREE, RELEASE, UNMAP };

struct rs__later {
	pthread_t thread;
	struct job {
		int kind;
		rs_engine *engine; /* RELEASE, UNMAP */
		void *p;
		size_t len;
	} *v;
	size_t n, cap;
};

rs__later *rs__later_new(void) { return calloc(1, sizeof(rs__later)); }

static void run(const struct job *j)
{
	if (j->kind == FREE)
		free(j->p);
	else if (j->kind == RELEASE)
		j->engine->ops->release(j->engine, j->p, j->len);
	else
		j->engine->ops->free(j->engine, j->p, j->len);
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

static void *work(void *arg)
{
	rs__later *l = arg;
	for (size_t i = 0; i < l->n; i++)
		run(&l->v[i]);
	return NULL;
}

static void later_free(rs__later *l)
{
	if (l)
		free(l->v);
	free(l);
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
	if (l->n) {
		RS_WARN("no thread to free the old model's memory (%s): freeing it here", strerror(e));
		work(l);
	}
	later_free(l);
}

void rs__later_wait(rs_trainer *tr)
{
	if (!tr || !tr->later)
		return;
	int e = pthread_join(tr->later->thread, NULL);
	if (e != 0) /* only a bug could: the thread is joinable and not this one */
		RS_WARN("waiting for the old model's memory to be freed: %s", strerror(e));
	later_free(tr->later);
	tr->later = NULL;
}
