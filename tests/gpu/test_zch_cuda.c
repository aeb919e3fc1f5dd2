/*
 * test_zch_cuda.c - tests kernels/cuda/zch.cu against the CPU reference
 * (kernels/zch.c): the same random batches go through rs_zch_find_or_insert
 * and rs_cuda_zch_find_or_insert step after step, and every step's status,
 * slots, fresh count and fresh list (in order) must be equal; at the end the
 * statistics and every owned bucket's state (IDs, last steps, LFU counts,
 * used slots, decay epoch) must be too, and find must agree on a mix of
 * known, unknown and unowned IDs.
 *
 * Batches mix Zipf-like IDs (many repeats across steps), IDs from a mid-size
 * pool, repeats inside the batch, never-seen 64-bit IDs and IDs of buckets
 * the table does not own; buckets are small so that eviction and overflow
 * (every slot of a bucket seen this step) both happen, LRU and LFU (with a
 * short decay period and a jump of steps that clears every count), bucket
 * sizes that are not powers of two, one slot per bucket, one bucket, steps
 * that repeat, empty batches, batches larger than one scratch allocation.
 * Then the argument checks.
 */
#include "kernels/cuda/zch_cuda.h"
#include "kernels/zch.h"
#include "tests/gpu/gpu_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "test_zch_cuda"

static double uniform01(void) { return (double)(gpu_test_rand() >> 11) / 9007199254740992.0; }

/* rs_zch_bucket_save's layout (zch.c): a 40-byte header, then per slot the IDs, last steps and counts */
#define SAVE_NUSED 20
#define SAVE_EPOCH 32
#define SAVE_HEADER 40

typedef struct zcase {
	const char *name;
	rs_eviction eviction;
	uint32_t buckets, spb;
	uint32_t decay;          /* lfu_decay_steps (0: the default) */
	uint32_t unowned_every;  /* bucket b is not owned when b % unowned_every == 1 (0: all owned) */
	int steps;
	int64_t max_n;           /* batch sizes uniform in [0, max_n] */
	uint64_t zipf_range;     /* Zipf-like IDs in [1, zipf_range] */
	uint32_t first_step;
	int expect_pressure;     /* the case must see evictions and overflows */
} zcase;

static void *dev_alloc(size_t bytes)
{
	void *d = NULL;
	GPU_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
	return d;
}

/*
 * Copies on the stream the table uses, waited for: the stream is non-blocking, so
 * a cudaMemcpy on the legacy stream would not be ordered with its kernels.
 */
static void to_dev(void *d, const void *h, size_t bytes, cudaStream_t stream)
{
	if (bytes) {
		GPU_CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
		GPU_CUDA(cudaStreamSynchronize(stream));
	}
}

static void from_dev(void *h, const void *d, size_t bytes, cudaStream_t stream)
{
	if (bytes) {
		GPU_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream));
		GPU_CUDA(cudaStreamSynchronize(stream));
	}
}

/* Index of the first difference between two int64 arrays, or -1. */
static int64_t first_diff(const int64_t *a, const int64_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return -1;
}

/* Some IDs whose buckets the table does not own (none when it owns every bucket). */
static int unowned_ids(const rs_zch_table *cpu, uint64_t *out, int want)
{
	int k = 0;
	if (rs_zch_owned(cpu) == rs_zch_buckets(cpu))
		return 0;
	while (k < want) {
		uint64_t id = gpu_test_rand();
		if (!rs_zch_owns(cpu, rs_zch_bucket_of(id, rs_zch_buckets(cpu))))
			out[k++] = id;
	}
	return k;
}

/* A random batch of n IDs (see the top of the file). */
static void make_batch(const zcase *c, uint64_t *ids, int64_t n, const uint64_t *foreign, int nforeign)
{
	uint64_t pool = 4 * (uint64_t)c->buckets * c->spb + 16;
	for (int64_t j = 0; j < n; j++) {
		uint64_t r = gpu_test_rand() % 100;
		if (r < 55)
			ids[j] = (uint64_t)exp(uniform01() * log((double)c->zipf_range)); /* P(id) ~ 1/id */
		else if (r < 75)
			ids[j] = 1000003 + gpu_test_rand() % pool;
		else if (r < 85 && j > 0)
			ids[j] = ids[gpu_test_rand() % (uint64_t)j];
		else if (r < 95 || nforeign == 0)
			ids[j] = gpu_test_rand();
		else if (r < 97)
			ids[j] = foreign[gpu_test_rand() % (uint64_t)nforeign];
		else
			ids[j] = r & 1 ? 0 : UINT64_MAX;
	}
}

/* Every bucket's state: the CPU's (through rs_zch_bucket_save) against the GPU's download. */
static void compare_state(const zcase *c, rs_zch_table *cpu, rs_cuda_zch *gpu, cudaStream_t stream)
{
	rs_err err = {{0}};
	size_t S = c->spb, cap = rs_zch_bucket_bytes(cpu, 0), len = 0;
	unsigned char *buf = malloc(cap), dummy = 0;
	uint64_t *ids = malloc(sizeof(uint64_t) * S);
	uint32_t *last = malloc(sizeof(uint32_t) * S), *count = malloc(sizeof(uint32_t) * S);
	int bad_buckets = 0;
	for (uint32_t b = 0; b < c->buckets; b++) {
		uint32_t nused = 0, epoch = 0;
		rs_status st = rs_cuda_zch_download(gpu, b, ids, last, count, &nused, &epoch, stream, &err);
		if (!rs_zch_owns(cpu, b)) {
			GPU_CHECK(st == RS_EINVAL && !rs_cuda_zch_owns(gpu, b), "%s: bucket %u: not owned, download gives %s",
				  c->name, b, rs_status_str(st));
			memset(&err, 0, sizeof(err));
			continue;
		}
		GPU_CHECK(st == RS_OK && rs_cuda_zch_owns(gpu, b), "%s: bucket %u: download: %s", c->name, b, err.msg);
		if (st != RS_OK)
			continue;
		st = rs_zch_bucket_save(cpu, b, &dummy, 0, buf, cap, &len);
		GPU_CHECK(st == RS_OK && len == cap, "%s: bucket %u: CPU save: %s", c->name, b, rs_status_str(st));
		uint32_t cn, ce;
		memcpy(&cn, buf + SAVE_NUSED, 4);
		memcpy(&ce, buf + SAVE_EPOCH, 4);
		int same = cn == nused && ce == epoch && !memcmp(buf + SAVE_HEADER, ids, 8 * S) &&
			   !memcmp(buf + SAVE_HEADER + 8 * S, last, 4 * S) && !memcmp(buf + SAVE_HEADER + 12 * S, count, 4 * S);
		if (!same && bad_buckets++ < 5)
			GPU_CHECK(same, "%s: bucket %u: state differs (nused %u/%u, epoch %u/%u, CPU/GPU)", c->name, b, cn,
				  nused, ce, epoch);
		/* and through the public accessor: every slot's ID and liveness */
		for (uint32_t s = 0; s < c->spb; s++) {
			int live;
			uint64_t id = rs_zch_slot_id(cpu, (int64_t)b * c->spb + s, &live);
			if ((s < nused) != (live != 0) || (live && id != ids[s])) {
				GPU_CHECK(0, "%s: slot %llu: CPU has id %llu live %d, GPU id %llu live %d", c->name,
					  (unsigned long long)b * c->spb + s, (unsigned long long)id, live,
					  (unsigned long long)ids[s], s < nused);
				break;
			}
		}
	}
	GPU_CHECK(bad_buckets == 0, "%s: %d buckets differ", c->name, bad_buckets);
	free(count);
	free(last);
	free(ids);
	free(buf);
}

static void compare_stats(const zcase *c, const char *when, rs_zch_table *cpu, rs_cuda_zch *gpu, cudaStream_t stream)
{
	rs_err err = {{0}};
	rs_zch_stats a = rs_zch_get_stats(cpu), b;
	memset(&b, 0xff, sizeof(b));
	rs_status st = rs_cuda_zch_get_stats(gpu, &b, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: stats: %s", c->name, err.msg);
	GPU_CHECK(a.inserts == b.inserts && a.hits == b.hits && a.evictions == b.evictions && a.misses == b.misses &&
			  a.overflows == b.overflows,
		  "%s: %s: stats differ: CPU inserts %llu hits %llu evictions %llu misses %llu overflows %llu, "
		  "GPU %llu %llu %llu %llu %llu",
		  c->name, when, (unsigned long long)a.inserts, (unsigned long long)a.hits,
		  (unsigned long long)a.evictions, (unsigned long long)a.misses, (unsigned long long)a.overflows,
		  (unsigned long long)b.inserts, (unsigned long long)b.hits, (unsigned long long)b.evictions,
		  (unsigned long long)b.misses, (unsigned long long)b.overflows);
}

static void run_case(const zcase *c)
{
	rs_err err = {{0}};
	rs_status st;
	rs_zch_config cfg = {.buckets = c->buckets, .slots = (uint64_t)c->buckets * c->spb, .eviction = c->eviction,
			     .lfu_decay_steps = c->decay};
	rs_zch_table *cpu = NULL;
	rs_cuda_zch *gpu = NULL;
	GPU_CHECK(rs_zch_create(&cfg, &cpu, &err) == RS_OK, "%s: CPU create: %s", c->name, err.msg);
	/* own every bucket but b % unowned_every == 1, in a scrambled order (the block order must not matter) */
	uint32_t *owned = malloc(sizeof(uint32_t) * c->buckets), nowned = 0;
	for (uint32_t k = 0; k < c->buckets; k++) {
		uint32_t b = (uint32_t)(((uint64_t)k * 7919u) % c->buckets);
		if (c->buckets % 7919u == 0)
			b = k;
		if (c->unowned_every && b % c->unowned_every == 1)
			continue;
		owned[nowned++] = b;
		GPU_CHECK(rs_zch_add_bucket(cpu, b) == RS_OK, "%s: CPU add bucket %u", c->name, b);
	}
	st = rs_cuda_zch_create(&cfg, owned, nowned, &gpu, &err);
	GPU_CHECK(st == RS_OK, "%s: create: %s", c->name, err.msg);
	if (st != RS_OK)
		exit(gpu_test_summary(PROG));
	GPU_CHECK(rs_cuda_zch_owned(gpu) == nowned && rs_cuda_zch_buckets(gpu) == c->buckets &&
			  rs_cuda_zch_slots_per_bucket(gpu) == c->spb,
		  "%s: geometry", c->name);

	cudaStream_t stream;
	GPU_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	size_t cap = (size_t)c->max_n + 1;
	uint64_t *ids = malloc(sizeof(uint64_t) * cap), foreign[64];
	int64_t *slots_c = malloc(sizeof(int64_t) * cap), *slots_g = malloc(sizeof(int64_t) * cap);
	int64_t *fresh_c = malloc(sizeof(int64_t) * cap), *fresh_g = malloc(sizeof(int64_t) * cap);
	uint64_t *d_ids = dev_alloc(sizeof(uint64_t) * cap);
	int64_t *d_slots = dev_alloc(sizeof(int64_t) * cap), *d_fresh = dev_alloc(sizeof(int64_t) * cap);
	int nforeign = unowned_ids(cpu, foreign, 64);

	uint32_t step = c->first_step;
	int step_fail = 0, notfound_steps = 0;
	int64_t total_ids = 0;
	for (int t = 0; t < c->steps; t++) {
		if (t > 0)
			step += gpu_test_rand() % 8 == 0 ? 0 : 1; /* now and then a step repeats */
		if (t == c->steps / 2)
			step += 40 * (c->decay ? c->decay : 1000) + 7; /* LFU: a decay by >= 32 halvings */
		int64_t n = t == 3 ? 0 : (int64_t)(gpu_test_rand() % (uint64_t)(c->max_n + 1));
		if (t == 1)
			n = c->max_n;
		int with_fresh = t % 7 != 5;
		make_batch(c, ids, n, foreign, nforeign);
		to_dev(d_ids, ids, sizeof(uint64_t) * (size_t)n, stream);

		size_t nf_c = 12345;
		int64_t nf_g = 12345;
		rs_status st_c = rs_zch_find_or_insert(cpu, ids, (size_t)n, step, slots_c, with_fresh ? fresh_c : NULL, &nf_c);
		memset(&err, 0, sizeof(err));
		rs_status st_g = rs_cuda_zch_find_or_insert(gpu, d_ids, n, step, d_slots, with_fresh ? d_fresh : NULL, &nf_g,
							    stream, &err);
		total_ids += n;
		notfound_steps += st_c == RS_ENOTFOUND;
		int ok = st_c == st_g;
		GPU_CHECK(st_c == st_g, "%s: step %d (%u): status CPU %s, GPU %s (%s)", c->name, t, step,
			  rs_status_str(st_c), rs_status_str(st_g), err.msg);
		if (st_g != RS_OK && st_g != RS_ENOTFOUND)
			break;
		from_dev(slots_g, d_slots, sizeof(int64_t) * (size_t)n, stream);
		int64_t d = first_diff(slots_c, slots_g, n);
		ok &= d < 0;
		GPU_CHECK(d < 0, "%s: step %d (%u): slot of id %llu at %lld: CPU %lld, GPU %lld", c->name, t, step,
			  d < 0 ? 0ull : (unsigned long long)ids[d], (long long)d, d < 0 ? 0ll : (long long)slots_c[d],
			  d < 0 ? 0ll : (long long)slots_g[d]);
		GPU_CHECK((int64_t)nf_c == nf_g, "%s: step %d (%u): %zu fresh slots on the CPU, %lld on the GPU", c->name, t,
			  step, nf_c, (long long)nf_g);
		ok &= (int64_t)nf_c == nf_g;
		if ((int64_t)nf_c == nf_g && nf_g > 0) {
			from_dev(fresh_g, d_fresh, sizeof(int64_t) * (size_t)nf_g, stream);
			d = first_diff(fresh_c, fresh_g, nf_g);
			ok &= d < 0;
			GPU_CHECK(d < 0, "%s: step %d (%u): fresh[%lld]: CPU %lld, GPU %lld", c->name, t, step, (long long)d,
				  d < 0 ? 0ll : (long long)fresh_c[d], d < 0 ? 0ll : (long long)fresh_g[d]);
		}
		if (!ok && ++step_fail >= 3)
			break; /* the tables have diverged: later steps would only repeat it */
	}
	compare_stats(c, "after the batches", cpu, gpu, stream);
	compare_state(c, cpu, gpu, stream);

	/* find: known IDs (live in the CPU table), unknown ones, unowned ones, repeats */
	int64_t nq = c->max_n < 500 ? c->max_n : 500;
	for (int64_t j = 0; j < nq; j++) {
		uint64_t r = gpu_test_rand() % 10;
		ids[j] = gpu_test_rand();
		if (r < 5) {
			for (int tries = 0; tries < 20; tries++) {
				int live;
				uint64_t id = rs_zch_slot_id(cpu, (int64_t)(gpu_test_rand() % cfg.slots), &live);
				if (live) {
					ids[j] = id;
					break;
				}
			}
		} else if (r < 6 && nforeign) {
			ids[j] = foreign[gpu_test_rand() % (uint64_t)nforeign];
		} else if (r < 7 && j > 0) {
			ids[j] = ids[j - 1];
		}
	}
	to_dev(d_ids, ids, sizeof(uint64_t) * (size_t)nq, stream);
	rs_status fc = rs_zch_find(cpu, ids, (size_t)nq, slots_c);
	memset(&err, 0, sizeof(err));
	rs_status fg = rs_cuda_zch_find(gpu, d_ids, nq, d_slots, stream, &err);
	GPU_CHECK(fc == fg, "%s: find: status CPU %s, GPU %s (%s)", c->name, rs_status_str(fc), rs_status_str(fg), err.msg);
	from_dev(slots_g, d_slots, sizeof(int64_t) * (size_t)nq, stream);
	int64_t d = first_diff(slots_c, slots_g, nq);
	GPU_CHECK(d < 0, "%s: find: slot of id %llu at %lld: CPU %lld, GPU %lld", c->name,
		  d < 0 ? 0ull : (unsigned long long)ids[d], (long long)d, d < 0 ? 0ll : (long long)slots_c[d],
		  d < 0 ? 0ll : (long long)slots_g[d]);
	int64_t found = 0;
	for (int64_t j = 0; j < nq; j++)
		found += slots_c[j] >= 0;
	GPU_CHECK(nq == 0 || (found > 0 && found < nq), "%s: find: %lld of %lld found, not a mix", c->name,
		  (long long)found, (long long)nq);
	GPU_CHECK(rs_cuda_zch_find(gpu, d_ids, 0, d_slots, stream, &err) == RS_OK, "%s: find of nothing", c->name);
	compare_stats(c, "after find", cpu, gpu, stream);
	compare_state(c, cpu, gpu, stream); /* find changes nothing */

	rs_zch_stats s = rs_zch_get_stats(cpu);
	if (c->expect_pressure)
		GPU_CHECK(s.evictions > 0 && s.overflows > 0, "%s: the batches caused %llu evictions and %llu overflows",
			  c->name, (unsigned long long)s.evictions, (unsigned long long)s.overflows);
	GPU_CHECK(nforeign == 0 || notfound_steps > 0, "%s: no batch met an unowned bucket", c->name);
	printf("%-28s %s %4u x %-3u %3u owned  %8lld ids  inserts %llu hits %llu evictions %llu overflows %llu "
	       "misses %llu\n",
	       c->name, c->eviction == RS_EVICT_LFU ? "lfu" : "lru", c->buckets, c->spb, nowned, (long long)total_ids,
	       (unsigned long long)s.inserts, (unsigned long long)s.hits, (unsigned long long)s.evictions,
	       (unsigned long long)s.overflows, (unsigned long long)s.misses);

	GPU_CUDA(cudaFree(d_fresh));
	GPU_CUDA(cudaFree(d_slots));
	GPU_CUDA(cudaFree(d_ids));
	GPU_CUDA(cudaStreamDestroy(stream));
	free(fresh_g);
	free(fresh_c);
	free(slots_g);
	free(slots_c);
	free(ids);
	rs_cuda_zch_destroy(gpu);
	rs_zch_destroy(cpu);
	free(owned);
}

/* Bad arguments come back as RS_EINVAL at the call, with a message, and change nothing. */
static void bad_arguments(void)
{
	rs_err err = {{0}};
	rs_cuda_zch *z = (rs_cuda_zch *)&err; /* must be reset to NULL */
	rs_zch_config cfg = {.buckets = 4, .slots = 32, .eviction = RS_EVICT_LRU};
	uint32_t owned[2] = {0, 2};

#define EXPECT_EINVAL(call, what)                                                                         \
	do {                                                                                              \
		memset(&err, 0, sizeof(err));                                                             \
		rs_status st_ = (call);                                                                   \
		GPU_CHECK(st_ == RS_EINVAL && err.msg[0], "bad arguments: %s: %s (\"%s\")", what,           \
			  rs_status_str(st_), err.msg);                                                   \
	} while (0)

	rs_zch_config bad = cfg;
	bad.buckets = 0;
	EXPECT_EINVAL(rs_cuda_zch_create(&bad, owned, 2, &z, &err), "zero buckets");
	GPU_CHECK(z == NULL, "bad arguments: a failed create leaves *out set");
	bad = cfg;
	bad.slots = 30;
	EXPECT_EINVAL(rs_cuda_zch_create(&bad, owned, 2, &z, &err), "slots not a multiple of buckets");
	bad.slots = 0;
	EXPECT_EINVAL(rs_cuda_zch_create(&bad, owned, 2, &z, &err), "zero slots");
	bad = cfg;
	bad.slots = (uint64_t)4 << 31;
	EXPECT_EINVAL(rs_cuda_zch_create(&bad, owned, 2, &z, &err), "2^31 slots per bucket");
	uint32_t outside[2] = {1, 4};
	EXPECT_EINVAL(rs_cuda_zch_create(&cfg, outside, 2, &z, &err), "owned bucket out of range");
	EXPECT_EINVAL(rs_cuda_zch_create(&cfg, NULL, 2, &z, &err), "no owned bucket list");
	EXPECT_EINVAL(rs_cuda_zch_create(NULL, owned, 2, &z, &err), "no config");
	EXPECT_EINVAL(rs_cuda_zch_create(&cfg, owned, 2, NULL, &err), "no output");
	GPU_CHECK(z == NULL, "bad arguments: a failed create leaves *out set");

	memset(&err, 0, sizeof(err));
	GPU_CHECK(rs_cuda_zch_create(&cfg, owned, 2, &z, &err) == RS_OK, "bad arguments: create: %s", err.msg);
	if (!z)
		return;
	uint64_t *d_ids = dev_alloc(sizeof(uint64_t) * 4);
	int64_t *d_slots = dev_alloc(sizeof(int64_t) * 4), *d_fresh = dev_alloc(sizeof(int64_t) * 4);
	uint64_t ids[4] = {1, 2, 3, 4};
	to_dev(d_ids, ids, sizeof(ids), 0);
	int64_t nf = 99;
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(z, d_ids, -1, 0, d_slots, d_fresh, &nf, 0, &err), "n < 0");
	GPU_CHECK(nf == 0, "bad arguments: nfresh not zeroed on an error");
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(z, d_ids, (int64_t)INT32_MAX + 1, 0, d_slots, d_fresh, &nf, 0, &err),
		      "n > INT32_MAX");
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(z, NULL, 4, 0, d_slots, d_fresh, &nf, 0, &err), "no ids");
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(z, d_ids, 4, 0, NULL, d_fresh, &nf, 0, &err), "no slots");
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(z, d_ids, 4, 0, d_slots, d_fresh, NULL, 0, &err), "fresh without nfresh");
	EXPECT_EINVAL(rs_cuda_zch_find_or_insert(NULL, d_ids, 4, 0, d_slots, d_fresh, &nf, 0, &err), "no table");
	EXPECT_EINVAL(rs_cuda_zch_find(z, d_ids, -1, d_slots, 0, &err), "find: n < 0");
	EXPECT_EINVAL(rs_cuda_zch_find(z, d_ids, (int64_t)INT32_MAX + 1, d_slots, 0, &err), "find: n > INT32_MAX");
	EXPECT_EINVAL(rs_cuda_zch_find(z, NULL, 4, d_slots, 0, &err), "find: no ids");
	EXPECT_EINVAL(rs_cuda_zch_find(z, d_ids, 4, NULL, 0, &err), "find: no slots");
	EXPECT_EINVAL(rs_cuda_zch_find(NULL, d_ids, 4, d_slots, 0, &err), "find: no table");
	EXPECT_EINVAL(rs_cuda_zch_download(z, 1, NULL, NULL, NULL, NULL, NULL, 0, &err), "download: bucket not owned");
	EXPECT_EINVAL(rs_cuda_zch_download(z, 4, NULL, NULL, NULL, NULL, NULL, 0, &err), "download: bucket out of range");
	EXPECT_EINVAL(rs_cuda_zch_get_stats(z, NULL, 0, &err), "stats: no output");

	/* nothing happened: empty stats, empty buckets; an empty batch is fine */
	memset(&err, 0, sizeof(err));
	nf = 99;
	GPU_CHECK(rs_cuda_zch_find_or_insert(z, NULL, 0, 0, NULL, NULL, &nf, 0, &err) == RS_OK && nf == 0,
		  "bad arguments: an empty batch: %s", err.msg);
	rs_zch_stats s;
	GPU_CHECK(rs_cuda_zch_get_stats(z, &s, 0, &err) == RS_OK, "bad arguments: stats: %s", err.msg);
	GPU_CHECK(s.inserts == 0 && s.hits == 0 && s.evictions == 0 && s.misses == 0 && s.overflows == 0,
		  "bad arguments: the stats moved");
	uint32_t nused = 99;
	GPU_CHECK(rs_cuda_zch_download(z, 2, NULL, NULL, NULL, &nused, NULL, 0, &err) == RS_OK && nused == 0,
		  "bad arguments: bucket 2 has %u used slots", nused);
	GPU_CHECK(rs_cuda_zch_owns(z, 0) && !rs_cuda_zch_owns(z, 1) && rs_cuda_zch_owns(z, 2) && !rs_cuda_zch_owns(z, 4),
		  "bad arguments: owned buckets");
#undef EXPECT_EINVAL

	GPU_CUDA(cudaFree(d_fresh));
	GPU_CUDA(cudaFree(d_slots));
	GPU_CUDA(cudaFree(d_ids));
	rs_cuda_zch_destroy(z);
	rs_cuda_zch_destroy(NULL);
}

int main(void)
{
	gpu_test_seed(0x2545f4914f6cdd1dull);
	gpu_test_require_device(PROG);
	static const zcase cases[] = {
		/* name                        eviction      buckets spb decay unowned steps max_n  zipf    first step  pressure */
		{"lru 16x8, 3 unowned", RS_EVICT_LRU, 16, 8, 0, 5, 60, 300, 2000, 0, 1},
		{"lfu 64x8, decay 3", RS_EVICT_LFU, 64, 8, 3, 4, 60, 600, 5000, 0, 1},
		{"lfu 37x5, decay 1", RS_EVICT_LFU, 37, 5, 1, 3, 50, 200, 1000, 0, 1},
		{"lru 37x12", RS_EVICT_LRU, 37, 12, 0, 6, 50, 400, 3000, 0, 1},
		{"lru 1x16, one bucket", RS_EVICT_LRU, 1, 16, 0, 0, 50, 40, 100, 0, 1},
		{"lfu 1000x1, one slot", RS_EVICT_LFU, 1000, 1, 2, 7, 40, 3000, 20000, 0, 1},
		{"lru 768x64, big batches", RS_EVICT_LRU, 768, 64, 0, 0, 20, 20000, 200000, 0, 0},
		{"lfu 256x12, steps near 2^32", RS_EVICT_LFU, 256, 12, 0, 2, 30, 6000, 50000, 4000000000u, 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
	bad_arguments();
	return gpu_test_summary(PROG);
}
