/*
 * marks.h - a bit per row, and a bit per word of them that is set exactly
 * when the word holds a mark: finding the few marked rows among millions
 * reads one summary word per 4096 rows and the words that hold marks
 * (the pre-copy's dirty rows and stale row hashes, found at the pause,
 * which must not grow with the state).
 *
 * Rows are 0 <= i < n (init's n), and a scan's end is at most n: each
 * call asserts its own (a row past n would mark a summary bit of no word).
 * Both arrays are one allocation: freeing m.bit frees the marks.
 */
#ifndef RS_MARKS_H
#define RS_MARKS_H

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct rs__marks {
	uint64_t *bit; /* row i: bit i & 63 of word i >> 6 */
	uint64_t *any; /* word w holds a mark: bit w & 63 of any[w >> 6] */
	int64_t n;     /* rows */
} rs__marks;

/* Marks for rows [0, n), all set or none; 0 without memory. */
static inline int rs__marks_init(rs__marks *m, int64_t n, int all)
{
	size_t words = (size_t)(n + 63) / 64, groups = (words + 63) / 64;
	m->bit = malloc(sizeof(uint64_t) * (words + groups + 1));
	m->any = m->bit ? m->bit + words : NULL;
	m->n = n;
	if (!m->bit)
		return 0;
	memset(m->bit, 0, sizeof(uint64_t) * (words + groups + 1));
	for (int64_t i = 0; all && i < n; i += 64) { /* only rows below n: a scan never meets a mark past them */
		uint64_t w = (uint64_t)(i >> 6), bits = n - i >= 64 ? ~0ull : ((uint64_t)1 << (n - i)) - 1;
		m->bit[w] = bits;
		m->any[w >> 6] |= (uint64_t)1 << (w & 63);
	}
	return 1;
}

static inline void rs__marks_set(rs__marks *m, int64_t i)
{
	assert(i >= 0 && i < m->n);
	m->bit[i >> 6] |= (uint64_t)1 << (i & 63);
	m->any[i >> 12] |= (uint64_t)1 << ((i >> 6) & 63);
}

static inline void rs__marks_unset(rs__marks *m, int64_t i)
{
	int64_t w = i >> 6;
	assert(i >= 0 && i < m->n);
	if (!(m->bit[w] &= ~((uint64_t)1 << (i & 63))))
		m->any[w >> 6] &= ~((uint64_t)1 << (w & 63));
}

/* Rows [i, i + n) unmarked: whole words at a time. */
static inline void rs__marks_unset_range(rs__marks *m, int64_t i, int64_t n)
{
	assert(i >= 0 && n >= 0 && n <= m->n - i);
	for (int64_t end = i + n; i < end;) {
		if ((i & 63) == 0 && end - i >= 64) {
			m->bit[i >> 6] = 0;
			m->any[i >> 12] &= ~((uint64_t)1 << ((i >> 6) & 63));
			i += 64;
		} else {
			rs__marks_unset(m, i++);
		}
	}
}

/* The first marked row in [i, end), or end. */
static inline int64_t rs__marks_next(const rs__marks *m, int64_t i, int64_t end)
{
	assert(i >= 0 && end <= m->n);
	while (i < end) {
		int64_t w = i >> 6;
		uint64_t words = m->any[w >> 6] >> (w & 63); /* this group's words from w on that hold marks */
		if (!words) {
			i = ((w >> 6) + 1) << 12; /* the next group's first row */
			continue;
		}
		w += __builtin_ctzll(words);
		if ((w << 6) > i)
			i = w << 6;
		if (i >= end)
			break;
		uint64_t bits = m->bit[w] >> (i & 63);
		if (bits)
			return i + __builtin_ctzll(bits) < end ? i + __builtin_ctzll(bits) : end;
		i = (w + 1) << 6;
	}
	return end;
}

#endif
