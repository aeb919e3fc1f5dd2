/*
 * buckets.c - see buckets.h. Balanced counts (within one), and the members
 * that already hold the most buckets get the larger shares, which is what
 * makes the number of moved buckets the minimum.
 */
#include "common/buckets.h"

#include <stdlib.h>

typedef struct member {
	int32_t id;
	uint32_t held;   /* buckets it holds in prev */
	uint32_t target; /* buckets it holds after */
} member;

static int cmp_held_desc(const void *a, const void *b)
{
	const member *x = a, *y = b;
	if (x->held != y->held)
		return x->held > y->held ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Fill m[] with each member's held count and balanced target; returns buckets kept, or -1. */
static int64_t targets(uint32_t nbuckets, int32_t nmembers, const int32_t *prev, member *m)
{
	int64_t kept = 0;
	if (nmembers <= 0)
		return -1;
	uint32_t base = nbuckets / (uint32_t)nmembers, rem = nbuckets % (uint32_t)nmembers;
	for (int32_t i = 0; i < nmembers; i++)
		m[i] = (member){.id = i};
	for (uint32_t b = 0; prev && b < nbuckets; b++)
		if (prev[b] >= 0 && prev[b] < nmembers)
			m[prev[b]].held++;
	qsort(m, (size_t)nmembers, sizeof(member), cmp_held_desc);
	for (int32_t i = 0; i < nmembers; i++) {
		m[i].target = base + ((uint32_t)i < rem);
		kept += m[i].held < m[i].target ? m[i].held : m[i].target;
	}
	/* back in member order */
	member *tmp = malloc(sizeof(member) * (size_t)nmembers);
	if (!tmp)
		return -1;
	for (int32_t i = 0; i < nmembers; i++)
		tmp[m[i].id] = m[i];
	for (int32_t i = 0; i < nmembers; i++)
		m[i] = tmp[i];
	free(tmp);
	return kept;
}

rs_status rs_buckets_assign(uint32_t nbuckets, int32_t nmembers, const int32_t *prev, const double *load,
			    int32_t *owner, rs_err *err)
{
	(void)load; /* per-bucket loads: not used yet, every bucket weighs 1 */
	if (nbuckets == 0)
		return rs_err_set(err, RS_EINVAL, "a ZCH table needs at least one bucket");
	if (nmembers <= 0)
		return rs_err_set(err, RS_EINVAL, "bucket assignment needs at least one member, got %d", nmembers);
	member *m = malloc(sizeof(member) * (size_t)nmembers);
	if (!m || targets(nbuckets, nmembers, prev, m) < 0) {
		free(m);
		return RS_ENOMEM;
	}
	/* keep each member's lowest buckets up to its target; free the rest */
	uint32_t *kept = calloc((size_t)nmembers, sizeof(uint32_t));
	if (!kept) {
		free(m);
		return RS_ENOMEM;
	}
	for (uint32_t b = 0; b < nbuckets; b++) {
		int32_t o = prev ? prev[b] : -1;
		if (o >= 0 && o < nmembers && kept[o] < m[o].target) {
			kept[o]++;
			owner[b] = o;
		} else {
			owner[b] = -1;
		}
	}
	/* members short of their share take free buckets in bucket order */
	int32_t next = 0;
	for (uint32_t b = 0; b < nbuckets; b++) {
		if (owner[b] >= 0)
			continue;
		while (kept[next] >= m[next].target)
			next++;
		owner[b] = next;
		kept[next]++;
	}
	free(kept);
	free(m);
	return RS_OK;
}

uint32_t rs_buckets_min_moves(uint32_t nbuckets, int32_t nmembers, const int32_t *prev)
{
	if (nbuckets == 0 || nmembers <= 0)
		return 0;
	member *m = malloc(sizeof(member) * (size_t)nmembers);
	int64_t kept = m ? targets(nbuckets, nmembers, prev, m) : -1;
	free(m);
	return kept < 0 ? nbuckets : nbuckets - (uint32_t)kept;
}
