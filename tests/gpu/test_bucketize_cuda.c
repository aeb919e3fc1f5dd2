/*
 * test_bucketize_cuda.c - tests kernels/cuda/bucketize.cu against a plain
 * host implementation written here from the header's definition, on random
 * inputs: row ranges of uneven sizes, several ranges per owner, owners with
 * no range, empty bags, one very long bag, repeated ids, no ids at all;
 * then an id outside the table and bad arguments, refused. Every output is
 * integer, so the comparison is exact.
 */
#include "kernels/cuda/bucketize_cuda.h"
#include "tests/gpu/gpu_test.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t below(int64_t n) { return (int64_t)(gpu_test_rand() % (uint64_t)n); }

/* The definition, one id at a time. */
static void reference(const int32_t *off, int32_t nbags, const int64_t *ids, const int64_t *row_start,
		      const int32_t *owner, int32_t nranges, int32_t nowners, int64_t *out_ids, int32_t *lengths,
		      int32_t *perm, int64_t *counts)
{
	int64_t k = 0;
	memset(lengths, 0, sizeof(int32_t) * (size_t)nowners * (size_t)nbags);
	for (int32_t o = 0; o < nowners; o++) {
		counts[o] = 0;
		for (int32_t b = 0; b < nbags; b++)
			for (int32_t j = off[b]; j < off[b + 1]; j++) {
				int32_t r = 0;
				while (r + 1 < nranges && row_start[r + 1] <= ids[j])
					r++;
				if (owner[r] != o)
					continue;
				out_ids[k] = ids[j];
				perm[j] = (int32_t)k++;
				lengths[(size_t)o * (size_t)nbags + (size_t)b]++;
				counts[o]++;
			}
	}
}

typedef struct dev {
	int32_t *off, *owner, *lengths, *perm;
	int64_t *ids, *row_start, *out_ids;
} dev;

static void *upload(const void *h, size_t bytes)
{
	void *d = NULL;
	GPU_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
	if (bytes)
		GPU_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

static void one_case(int c, int32_t nbags, int32_t long_bag, int64_t rows, int32_t nranges, int32_t nowners,
		     cudaStream_t s)
{
	int32_t *off = malloc(sizeof(int32_t) * (size_t)(nbags + 1));
	off[0] = 0;
	for (int32_t b = 0; b < nbags; b++)
		off[b + 1] = off[b] + (b == long_bag ? 100000 : below(4) == 0 ? 0 : (int32_t)below(40));
	int64_t nids = off[nbags];
	int64_t *ids = malloc(sizeof(int64_t) * (size_t)(nids + 1));
	for (int64_t j = 0; j < nids; j++) /* skewed: repeats are common */
		ids[j] = below(4) ? below(rows < 50 ? rows : 50) : below(rows);
	int64_t *row_start = malloc(sizeof(int64_t) * (size_t)(nranges + 1));
	int32_t *owner = malloc(sizeof(int32_t) * (size_t)nranges);
	row_start[0] = 0;
	for (int32_t r = 1; r < nranges; r++) /* uneven cuts, sorted, some ranges empty */
		row_start[r] = row_start[r - 1] + below(2 * rows / nranges + 1);
	for (int32_t r = 1; r < nranges; r++)
		if (row_start[r] > rows)
			row_start[r] = rows;
	row_start[nranges] = rows;
	for (int32_t r = 0; r < nranges; r++)
		owner[r] = (int32_t)below(nowners > 1 ? nowners - 1 : 1); /* the last owner holds nothing */
	size_t nl = (size_t)nowners * (size_t)nbags;
	int64_t *want_ids = malloc(sizeof(int64_t) * (size_t)(nids + 1)), *got_ids = malloc(sizeof(int64_t) * (size_t)(nids + 1));
	int32_t *want_len = malloc(sizeof(int32_t) * nl), *got_len = malloc(sizeof(int32_t) * nl);
	int32_t *want_perm = malloc(sizeof(int32_t) * (size_t)(nids + 1)), *got_perm = malloc(sizeof(int32_t) * (size_t)(nids + 1));
	int64_t *want_cnt = malloc(sizeof(int64_t) * (size_t)nowners), *got_cnt = malloc(sizeof(int64_t) * (size_t)nowners);
	reference(off, nbags, ids, row_start, owner, nranges, nowners, want_ids, want_len, want_perm, want_cnt);

	dev d = {upload(off, sizeof(int32_t) * (size_t)(nbags + 1)), upload(owner, sizeof(int32_t) * (size_t)nranges),
		 upload(NULL, 0), upload(NULL, 0), upload(ids, sizeof(int64_t) * (size_t)nids),
		 upload(row_start, sizeof(int64_t) * (size_t)(nranges + 1)), upload(NULL, 0)};
	GPU_CUDA(cudaFree(d.lengths));
	GPU_CUDA(cudaFree(d.perm));
	GPU_CUDA(cudaFree(d.out_ids));
	GPU_CUDA(cudaMalloc((void **)&d.lengths, sizeof(int32_t) * nl));
	GPU_CUDA(cudaMalloc((void **)&d.perm, sizeof(int32_t) * (size_t)(nids + 1)));
	GPU_CUDA(cudaMalloc((void **)&d.out_ids, sizeof(int64_t) * (size_t)(nids + 1)));
	rs_err err = {0};
	rs_status st = rs_cuda_bucketize(d.off, nbags, d.ids, nids, d.row_start, d.owner, nranges, nowners, d.out_ids,
					 d.lengths, d.perm, got_cnt, s, &err);
	GPU_CHECK(st == RS_OK, "case %d: %s", c, err.msg);
	GPU_CUDA(cudaMemcpy(got_ids, d.out_ids, sizeof(int64_t) * (size_t)nids, cudaMemcpyDeviceToHost));
	GPU_CUDA(cudaMemcpy(got_perm, d.perm, sizeof(int32_t) * (size_t)nids, cudaMemcpyDeviceToHost));
	GPU_CUDA(cudaMemcpy(got_len, d.lengths, sizeof(int32_t) * nl, cudaMemcpyDeviceToHost));
	GPU_CHECK(!memcmp(got_ids, want_ids, sizeof(int64_t) * (size_t)nids), "case %d: grouped ids differ", c);
	GPU_CHECK(!memcmp(got_perm, want_perm, sizeof(int32_t) * (size_t)nids), "case %d: the permutation differs", c);
	GPU_CHECK(!memcmp(got_len, want_len, sizeof(int32_t) * nl), "case %d: the lengths differ", c);
	GPU_CHECK(!memcmp(got_cnt, want_cnt, sizeof(int64_t) * (size_t)nowners), "case %d: the counts differ", c);
	printf("case %d: %d bags, %lld ids, %d ranges, %d owners: %s\n", c, nbags, (long long)nids, nranges, nowners,
	       gpu_test_failures ? "failures so far" : "equal");

	if (nids) { /* an id past the table: refused */
		int64_t badid = rows + 7;
		GPU_CUDA(cudaMemcpy(d.ids + nids / 2, &badid, sizeof(badid), cudaMemcpyHostToDevice));
		st = rs_cuda_bucketize(d.off, nbags, d.ids, nids, d.row_start, d.owner, nranges, nowners, d.out_ids,
				       d.lengths, d.perm, got_cnt, s, &err);
		GPU_CHECK(st == RS_EINVAL && strstr(err.msg, "outside"), "case %d: an id past the table: %s", c, err.msg);
	}
	GPU_CUDA(cudaFree(d.off));
	GPU_CUDA(cudaFree(d.owner));
	GPU_CUDA(cudaFree(d.lengths));
	GPU_CUDA(cudaFree(d.perm));
	GPU_CUDA(cudaFree(d.ids));
	GPU_CUDA(cudaFree(d.row_start));
	GPU_CUDA(cudaFree(d.out_ids));
	free(off), free(ids), free(row_start), free(owner), free(want_ids), free(got_ids), free(want_len), free(got_len);
	free(want_perm), free(got_perm), free(want_cnt), free(got_cnt);
}

int main(void)
{
	gpu_test_seed(0x2545f4914f6cdd1dull);
	gpu_test_require_device("test_bucketize_cuda");
	cudaStream_t s;
	GPU_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	/* case, bags, the long bag (-1: none), rows, ranges, owners */
	one_case(0, 1, -1, 10, 1, 1, s);
	one_case(1, 64, -1, 1000, 4, 4, s);
	one_case(2, 4096, 17, 1000000, 37, 8, s);
	one_case(3, 512, -1, 300, 300, 5, s);   /* one row per range */
	one_case(4, 3, 0, 5000000000ll, 9, 3, s); /* ids past 2^32 */
	one_case(5, 200, -1, 100, 6, 64, s);
	for (int c = 6; c < 20; c++)
		one_case(c, 1 + (int32_t)below(3000), below(3) ? -1 : 0, 1 + below(2000000), 1 + (int32_t)below(40),
			 1 + (int32_t)below(16), s);
	/* bad arguments are refused at the call */
	rs_err err = {0};
	int64_t counts[2];
	GPU_CHECK(rs_cuda_bucketize(NULL, 1, NULL, 0, NULL, NULL, 1, 1, NULL, NULL, NULL, counts, s, &err) == RS_EINVAL,
		  "NULL offsets accepted");
	GPU_CHECK(rs_cuda_bucketize((int32_t *)8, 0, NULL, 0, (int64_t *)8, (int32_t *)8, 1, 1, NULL, (int32_t *)8, NULL,
				    counts, s, &err) == RS_EINVAL,
		  "no bags accepted");
	GPU_CUDA(cudaStreamDestroy(s));
	return gpu_test_summary("test_bucketize_cuda");
}
