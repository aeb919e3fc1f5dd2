/*
 * test_data_synth.c - tests worker/data_synth.c (and common/batch.c):
 * samples are pure functions of their index (any split into slices gives
 * the same data, which is what makes training independent of the world
 * size), IDs lie in their tables, IDs are Zipf-skewed, the teacher's AUC is
 * a reachable ceiling well above 0.5, and evaluation samples are not
 * training samples.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker/data.h"
#include "worker/metrics.h"

#include <stdlib.h>
#include <string.h>

static const char *json =
	"{\"tables\": [{\"name\": \"a\", \"rows\": 5000, \"dim\": 8, \"features\": [\"x\", \"y\"], \"pooling_factor\": 3},"
	"{\"name\": \"b\", \"rows\": 100, \"dim\": 8, \"features\": [\"z\"], \"pooling_factor\": 0.5},"
	"{\"name\": \"c\", \"dim\": 8, \"features\": [\"w\"], \"zch\": {\"buckets\": 8, \"slots\": 64}}],"
	"\"data\": {\"seed\": 11}}";

static rs_config *cfg;
static rs_data *data;

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_config_parse(json, strlen(json), "t.json", &cfg, &err) != RS_OK ||
	    rs_data_open(cfg, &data, &err) != RS_OK)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rs_data_close(data);
	rs_config_free(cfg);
	return 0;
}

static void assert_same_sample(const rs_batch *a, int32_t i, const rs_batch *b, int32_t j)
{
	assert_memory_equal(a->dense + i * RS_NUM_DENSE, b->dense + j * RS_NUM_DENSE, sizeof(float) * RS_NUM_DENSE);
	assert_true(a->labels[i] == b->labels[j]);
	for (int32_t f = 0; f < a->nfeatures; f++) {
		int32_t la = a->offsets[f][i + 1] - a->offsets[f][i], lb = b->offsets[f][j + 1] - b->offsets[f][j];
		assert_int_equal(la, lb);
		assert_memory_equal(a->ids[f] + a->offsets[f][i], b->ids[f] + b->offsets[f][j], sizeof(int64_t) * (size_t)la);
	}
}

static void test_any_split_gives_the_same_samples(void **state)
{
	(void)state;
	rs_batch whole, part;
	assert_int_equal(rs_batch_init(&whole, data->nfeatures), RS_OK);
	assert_int_equal(rs_batch_init(&part, data->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(data, 1000, 1000, &whole), RS_OK);
	int32_t cuts[] = {0, 1, 300, 333, 999, 1000};
	for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++) {
		int32_t lo = cuts[c], n = cuts[c + 1] - lo;
		assert_int_equal(rs_data_fill(data, 1000 + lo, n, &part), RS_OK);
		assert_int_equal(part.first_sample, 1000 + lo);
		for (int32_t i = 0; i < n; i++)
			assert_same_sample(&whole, lo + i, &part, i);
	}
	rs_batch_free(&part);
	rs_batch_free(&whole);
}

static void test_ids_in_range_and_skewed(void **state)
{
	(void)state;
	rs_batch b;
	assert_int_equal(rs_batch_init(&b, data->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(data, 0, 20000, &b), RS_OK);
	int64_t *count = calloc(5000, sizeof(int64_t)), total = b.offsets[0][b.size], top = 0;
	for (int64_t j = 0; j < total; j++) {
		assert_true(b.ids[0][j] >= 0 && b.ids[0][j] < 5000);
		count[b.ids[0][j]]++;
	}
	for (int r = 0; r < 5000; r++)
		top = count[r] > top ? count[r] : top;
	/* uniform would give the top row about total / 5000 hits; Zipf(1.05) gives it a large share */
	assert_true(top > 50 * total / 5000);
	/* pooling factor 3: bags of 1..5; 0.5: empty or one ID */
	assert_true(total > 2 * 20000 && total < 4 * 20000);
	for (int32_t i = 0; i < b.size; i++)
		assert_true(b.offsets[2][i + 1] - b.offsets[2][i] <= 1);
	for (int64_t j = 0; j < b.offsets[2][b.size]; j++)
		assert_true(b.ids[2][j] >= 0 && b.ids[2][j] < 100);
	/* the ZCH feature draws raw IDs from a space larger than its 64 slots */
	int64_t big = 0;
	for (int64_t j = 0; j < b.offsets[3][b.size]; j++)
		big += b.ids[3][j] >= 64;
	assert_true(big > 0);
	free(count);
	rs_batch_free(&b);
}

static void test_teacher_is_a_learnable_ceiling(void **state)
{
	(void)state;
	const int32_t n = 20000;
	rs_batch b;
	assert_int_equal(rs_batch_init(&b, data->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(data, RS_EVAL_BASE, n, &b), RS_OK);
	float *p = malloc(sizeof(float) * n);
	double pos = 0;
	for (int32_t i = 0; i < n; i++) {
		p[i] = (float)data->ops->teacher_prob(data, RS_EVAL_BASE + i);
		pos += b.labels[i];
	}
	double auc = rs_auc(p, b.labels, (size_t)n);
	print_message("teacher AUC %.4f, positives %.3f\n", auc, pos / n);
	assert_true(auc > 0.7 && auc < 0.9);
	assert_true(pos / n > 0.1 && pos / n < 0.9);
	/* evaluation samples differ from training samples */
	rs_batch t;
	assert_int_equal(rs_batch_init(&t, data->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(data, 0, 100, &t), RS_OK);
	assert_true(memcmp(t.dense, b.dense, sizeof(float) * 100 * RS_NUM_DENSE) != 0);
	rs_batch_free(&t);
	free(p);
	rs_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_any_split_gives_the_same_samples),
		cmocka_unit_test(test_ids_in_range_and_skewed),
		cmocka_unit_test(test_teacher_is_a_learnable_ceiling),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
