/*
 * test_config.c - tests common/config.c: defaults, every field, every
 * bad-config rule (each must name the file, the table and the field), the
 * example configs, and a fail-each-allocation pass over jansson's
 * allocations.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/config.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static rs_config *parse_ok(const char *json)
{
	rs_config *cfg = NULL;
	rs_err err = {0};
	if (rs_config_parse(json, strlen(json), "t.json", &cfg, &err) != RS_OK)
		fail_msg("expected the config to load: %s", err.msg);
	return cfg;
}

static void test_minimal_gets_defaults(void **state)
{
	(void)state;
	rs_config *cfg = parse_ok("{\"tables\": [{\"name\": \"a\", \"rows\": 10, \"dim\": 8, \"features\": [\"x\"]}]}");
	const rs_table_config *t = &cfg->tables[0];
	assert_int_equal(cfg->ntables, 1);
	assert_string_equal(t->name, "a");
	assert_int_equal(t->pooling, RS_POOL_SUM);
	assert_true(t->pooling_factor == 1.0);
	assert_int_equal(t->dtype, RS_DTYPE_FP32);
	assert_int_equal(t->sharding, RS_SHARD_AUTO);
	assert_int_equal(t->rank, -1);
	assert_null(t->colocate);
	assert_false(t->has_zch);
	assert_int_equal(cfg->optimizer.kind, RS_OPT_ROWWISE_ADAGRAD);
	assert_true(cfg->optimizer.lr == 0.05f);
	assert_int_equal(cfg->dense.nbottom, 2);
	assert_int_equal(cfg->dense.bottom_mlp[1], 8); /* the shared table dim */
	assert_int_equal(cfg->dense.ntop, 2);
	assert_int_equal(cfg->dense.interaction, RS_INTERACTION_AUTO);
	assert_int_equal(cfg->data.kind, RS_DATA_SYNTHETIC);
	assert_true(cfg->data.zipf_alpha == 1.05);
	assert_int_equal(cfg->cluster.partial_recovery, 0);
	assert_int_equal(cfg->cluster.precopy, 1);
	assert_true(cfg->cluster.precopy_share == 0.2);
	assert_int_equal(cfg->data.eval_every, 50);
	assert_int_equal(cfg->train.global_batch, 1024);
	assert_int_equal(cfg->train.steps, 200);
	assert_int_equal(cfg->train.micro_batch, 32);
	assert_int_equal(cfg->train.min_step_ms, 0); /* as fast as the workers can */
	assert_int_equal(cfg->train.deterministic, 1);
	assert_int_equal(cfg->cluster.ranks_per_node, 8);
	assert_true(cfg->cluster.memory_per_rank == 16ull << 30);
	assert_int_equal(rs_table_row_bytes(cfg, t), 8 * 4 + 4);
	rs_config_free(cfg);
}

static void test_every_field(void **state)
{
	(void)state;
	rs_config *cfg = parse_ok(
		"{\"tables\": ["
		"{\"name\": \"a\", \"rows\": 1000, \"dim\": 32, \"features\": [\"x\", \"y\"], \"pooling\": \"mean\","
		" \"pooling_factor\": 2.5, \"dtype\": \"bf16\", \"sharding\": \"column_wise\", \"rank\": 3},"
		"{\"name\": \"b\", \"dim\": 32, \"features\": [\"z\"], \"colocate\": \"g\","
		" \"zch\": {\"buckets\": 10, \"slots\": 100, \"eviction\": \"lfu\", \"lfu_decay_steps\": 7}}],"
		"\"optimizer\": {\"type\": \"adam\", \"lr\": 0.1, \"eps\": 0.001, \"beta1\": 0.5, \"beta2\": 0.6},"
		"\"dense\": {\"bottom_mlp\": [8, 32], \"top_mlp\": [16], \"interaction\": \"dot\", \"lr\": 0.2},"
		"\"data\": {\"source\": \"criteo\", \"paths\": [\"day_0.tsv\"], \"seed\": 9, \"zipf_alpha\": 1.2,"
		" \"eval_samples\": 5, \"eval_every\": 3},"
		"\"train\": {\"global_batch\": 64, \"steps\": 11, \"seed\": 12, \"deterministic\": false, \"min_step_ms\": 40},"
		"\"cluster\": {\"ranks_per_node\": 2, \"memory_per_rank\": \"512MiB\", \"sharding_group\": 4,"
		" \"replica_sync\": {\"every\": 6}, \"recovery\": \"partial\", \"precopy\": false, \"precopy_share\": 0.5}}");
	const rs_table_config *a = &cfg->tables[0], *b = &cfg->tables[1];
	assert_int_equal(a->nfeatures, 2);
	assert_string_equal(a->features[1], "y");
	assert_int_equal(a->pooling, RS_POOL_MEAN);
	assert_true(a->pooling_factor == 2.5);
	assert_int_equal(a->dtype, RS_DTYPE_BF16);
	assert_int_equal(a->sharding, RS_SHARD_CW);
	assert_int_equal(a->rank, 3);
	assert_true(b->has_zch);
	assert_int_equal(b->rows, 100);
	assert_int_equal(b->zch.buckets, 10);
	assert_int_equal(b->zch.eviction, RS_EVICT_LFU);
	assert_int_equal(b->zch.lfu_decay_steps, 7);
	assert_string_equal(b->colocate, "g");
	assert_int_equal(cfg->optimizer.kind, RS_OPT_ADAM);
	assert_true(cfg->optimizer.beta2 == 0.6f);
	assert_int_equal(cfg->dense.ntop, 1);
	assert_int_equal(cfg->dense.interaction, RS_INTERACTION_DOT);
	assert_int_equal(cfg->data.kind, RS_DATA_CRITEO);
	assert_string_equal(cfg->data.paths[0], "day_0.tsv");
	assert_int_equal(cfg->train.global_batch, 64);
	assert_int_equal(cfg->train.deterministic, 0);
	assert_int_equal(cfg->train.micro_batch, 32); /* the largest divisor of 64 up to 32 */
	assert_int_equal(cfg->train.min_step_ms, 40);
	assert_true(cfg->cluster.memory_per_rank == 512ull << 20);
	assert_int_equal(cfg->cluster.sharding_group, 4);
	assert_int_equal(cfg->cluster.replica_sync_every, 6);
	assert_int_equal(cfg->cluster.partial_recovery, 1);
	assert_int_equal(cfg->cluster.precopy, 0);
	assert_true(cfg->cluster.precopy_share == 0.5);
	/* bf16 rows with adam: 2 bytes per element plus two fp32 moments */
	assert_int_equal(rs_table_row_bytes(cfg, a), 32 * 2 + 8 * 32);
	assert_int_equal(rs_config_find_table(cfg, "b"), 1);
	assert_int_equal(rs_config_find_table(cfg, "nope"), -1);
	rs_config_free(cfg);
}

#define T1 "{\"name\": \"a\", \"rows\": 10, \"dim\": 8, \"features\": [\"x\"]"

/* Each bad config, and words its message must contain (besides the file name). */
static const struct bad_case {
	const char *name;
	const char *json;
	const char *want[3];
} bad_cases[] = {
	{"syntax", "{\"tables\": [", {"t.json:1:"}},
	{"empty", "", {"empty"}},
	{"not an object", "[1]", {"object"}},
	{"no tables", "{}", {"tables", "missing"}},
	{"empty tables", "{\"tables\": []}", {"tables"}},
	{"unknown top key", "{\"tables\": [" T1 "}], \"bogus\": 1}", {"bogus"}},
	{"unknown table key", "{\"tables\": [" T1 ", \"pooling_facter\": 2}]}", {"'a'", "pooling_facter"}},
	{"missing name", "{\"tables\": [{\"rows\": 1, \"dim\": 4, \"features\": [\"x\"]}]}", {"tables[0]", "name"}},
	{"missing rows", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"]}]}", {"'a'", "rows"}},
	{"missing dim", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"features\": [\"x\"]}]}", {"'a'", "dim"}},
	{"missing features", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"dim\": 4}]}", {"'a'", "features"}},
	{"rows zero", "{\"tables\": [{\"name\": \"a\", \"rows\": 0, \"dim\": 4, \"features\": [\"x\"]}]}", {"'a'", "rows"}},
	{"dim negative", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"dim\": -4, \"features\": [\"x\"]}]}", {"'a'", "dim"}},
	{"rows not integer", "{\"tables\": [{\"name\": \"a\", \"rows\": 4.5, \"dim\": 4, \"features\": [\"x\"]}]}", {"'a'", "rows", "integer"}},
	{"rows string", "{\"tables\": [{\"name\": \"a\", \"rows\": \"4\", \"dim\": 4, \"features\": [\"x\"]}]}", {"'a'", "rows"}},
	{"cw dim", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"dim\": 6, \"features\": [\"x\"], \"sharding\": \"column_wise\"}]}", {"'a'", "dim", "multiple of 4"}},
	{"grid dim", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"dim\": 10, \"features\": [\"x\"], \"sharding\": \"grid\"}]}", {"'a'", "dim"}},
	{"bad sharding", "{\"tables\": [" T1 ", \"sharding\": \"diagonal\"}]}", {"'a'", "sharding"}},
	{"bad pooling", "{\"tables\": [" T1 ", \"pooling\": \"max\"}]}", {"'a'", "pooling"}},
	{"bad dtype", "{\"tables\": [" T1 ", \"dtype\": \"int8\"}]}", {"'a'", "dtype"}},
	{"pooling factor zero", "{\"tables\": [" T1 ", \"pooling_factor\": 0}]}", {"'a'", "pooling_factor"}},
	{"duplicate table", "{\"tables\": [" T1 "}, {\"name\": \"a\", \"rows\": 1, \"dim\": 4, \"features\": [\"y\"]}]}", {"'a'", "name", "duplicate"}},
	{"duplicate feature", "{\"tables\": [" T1 "}, {\"name\": \"b\", \"rows\": 1, \"dim\": 4, \"features\": [\"x\"]}]}", {"'b'", "features", "'x'"}},
	{"feature twice", "{\"tables\": [{\"name\": \"a\", \"rows\": 4, \"dim\": 4, \"features\": [\"x\", \"x\"]}]}", {"'a'", "features"}},
	{"negative rank", "{\"tables\": [" T1 ", \"rank\": -1}]}", {"'a'", "rank"}},
	{"pin with row_wise", "{\"tables\": [" T1 ", \"rank\": 1, \"sharding\": \"row_wise\"}]}", {"'a'", "rank"}},
	{"pins contradict group", "{\"tables\": [" T1 ", \"colocate\": \"g\", \"rank\": 1},"
	 "{\"name\": \"b\", \"rows\": 1, \"dim\": 4, \"features\": [\"y\"], \"colocate\": \"g\", \"rank\": 2}]}", {"'b'", "rank", "'g'"}},
	{"colocate row_wise", "{\"tables\": [" T1 ", \"colocate\": \"g\", \"sharding\": \"row_wise\"}]}", {"'a'", "colocate"}},
	{"zch buckets zero", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"buckets\": 0, \"slots\": 8}}]}", {"'a'", "zch.buckets"}},
	{"zch slots not multiple", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"buckets\": 3, \"slots\": 8}}]}", {"'a'", "zch.slots", "multiple"}},
	{"zch missing slots", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"buckets\": 3}}]}", {"'a'", "zch.slots"}},
	{"zch rows differ", "{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"buckets\": 2, \"slots\": 8}}]}", {"'a'", "rows"}},
	{"zch bad eviction", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"slots\": 768, \"eviction\": \"fifo\"}}]}", {"'a'", "zch.eviction"}},
	{"zch unknown key", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"zch\": {\"slots\": 768, \"ttl\": 5}}]}", {"'a'", "ttl"}},
	{"zch column_wise", "{\"tables\": [{\"name\": \"a\", \"dim\": 4, \"features\": [\"x\"], \"sharding\": \"column_wise\", \"zch\": {\"slots\": 768}}]}", {"'a'", "sharding"}},
	{"bad optimizer", "{\"tables\": [" T1 "}], \"optimizer\": {\"type\": \"lamb\"}}", {"optimizer.type"}},
	{"optimizer lr", "{\"tables\": [" T1 "}], \"optimizer\": {\"lr\": 0}}", {"optimizer.lr"}},
	{"optimizer unknown", "{\"tables\": [" T1 "}], \"optimizer\": {\"momentum\": 0.9}}", {"momentum"}},
	{"dot dims", "{\"tables\": [" T1 "}], \"dense\": {\"bottom_mlp\": [16], \"interaction\": \"dot\"}}", {"'a'", "dim", "dot"}},
	{"mlp width", "{\"tables\": [" T1 "}], \"dense\": {\"top_mlp\": [0]}}", {"dense.top_mlp"}},
	{"criteo without paths", "{\"tables\": [" T1 "}], \"data\": {\"source\": \"criteo\"}}", {"data.paths"}},
	{"paths for synthetic", "{\"tables\": [" T1 "}], \"data\": {\"paths\": [\"x\"]}}", {"data.paths"}},
	{"eval every", "{\"tables\": [" T1 "}], \"data\": {\"eval_every\": 0}}", {"data.eval_every"}},
	{"batch", "{\"tables\": [" T1 "}], \"train\": {\"global_batch\": 0}}", {"train.global_batch"}},
	{"deterministic", "{\"tables\": [" T1 "}], \"train\": {\"deterministic\": \"yes\"}}", {"train.deterministic", "true or false"}},
	{"micro batch", "{\"tables\": [" T1 "}], \"train\": {\"global_batch\": 100, \"micro_batch\": 30}}", {"train.micro_batch", "divide", "100"}},
	{"micro batch plain", "{\"tables\": [" T1 "}], \"train\": {\"global_batch\": 100, \"micro_batch\": 30, \"deterministic\": false}}", {"train.micro_batch", "divide"}},
	{"micro batch default", "{\"tables\": [" T1 "}], \"train\": {\"global_batch\": 1031}}", {"train.micro_batch", "1031", "deterministic"}},
	{"min step", "{\"tables\": [" T1 "}], \"train\": {\"min_step_ms\": 10001}}", {"train.min_step_ms"}},
	{"micro batch big", "{\"tables\": [" T1 "}], \"train\": {\"global_batch\": 100, \"micro_batch\": 101}}", {"train.micro_batch"}},
	{"memory", "{\"tables\": [" T1 "}], \"cluster\": {\"memory_per_rank\": \"lots\"}}", {"cluster.memory_per_rank"}},
	{"ranks per node", "{\"tables\": [" T1 "}], \"cluster\": {\"ranks_per_node\": 0}}", {"cluster.ranks_per_node"}},
	{"sharding group", "{\"tables\": [" T1 "}], \"cluster\": {\"sharding_group\": 0}}", {"cluster.sharding_group"}},
	{"replica sync", "{\"tables\": [" T1 "}], \"cluster\": {\"replica_sync\": \"sometimes\"}}", {"cluster.replica_sync", "exact"}},
	{"recovery", "{\"tables\": [" T1 "}], \"cluster\": {\"recovery\": \"sometimes\"}}", {"cluster.recovery", "partial"}},
	{"precopy", "{\"tables\": [" T1 "}], \"cluster\": {\"precopy\": 1}}", {"cluster.precopy", "true or false"}},
	{"precopy share 0", "{\"tables\": [" T1 "}], \"cluster\": {\"precopy_share\": 0}}", {"cluster.precopy_share", "(0, 1]"}},
	{"precopy share 1.5", "{\"tables\": [" T1 "}], \"cluster\": {\"precopy_share\": 1.5}}", {"precopy_share", "1.5"}},
	{"recovery type", "{\"tables\": [" T1 "}], \"cluster\": {\"recovery\": 1}}", {"cluster.recovery", "rollback"}},
	{"replica sync every", "{\"tables\": [" T1 "}], \"cluster\": {\"replica_sync\": {\"every\": 0}}}", {"replica_sync.every"}},
	{"replica sync key", "{\"tables\": [" T1 "}], \"cluster\": {\"replica_sync\": {\"evry\": 2}}}", {"evry"}},
	{"duplicate key", "{\"tables\": [" T1 ", \"dim\": 4}]}", {"t.json:1:"}},
};

static void test_bad_configs(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *c = &bad_cases[i];
		rs_config *cfg = NULL;
		rs_err err = {0};
		rs_status st = rs_config_parse(c->json, strlen(c->json), "t.json", &cfg, &err);
		if (st != RS_EINVAL)
			fail_msg("case '%s': status %s, want invalid input", c->name, rs_status_str(st));
		assert_null(cfg);
		if (!strstr(err.msg, "t.json"))
			fail_msg("case '%s': message does not name the file: %s", c->name, err.msg);
		for (int k = 0; k < 3 && c->want[k]; k++)
			if (!strstr(err.msg, c->want[k]))
				fail_msg("case '%s': message lacks \"%s\": %s", c->name, c->want[k], err.msg);
	}
}

static void test_files(void **state)
{
	(void)state;
	static const char *const examples[] = {"examples/minimal.json", "examples/dlrm-small.json",
					       "examples/dlrm-large.json"};
	for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
		rs_config *cfg = NULL;
		rs_err err = {0};
		if (rs_config_load(examples[i], &cfg, &err) != RS_OK)
			fail_msg("%s", err.msg);
		rs_config_free(cfg);
	}
	rs_config *cfg = NULL;
	rs_err err = {0};
	assert_int_equal(rs_config_load("no/such/file.json", &cfg, &err), RS_EIO);
	assert_non_null(strstr(err.msg, "no/such/file.json"));
	assert_null(cfg);
}

/*
 * The digest every member of a job must share: the same for configs that
 * differ only where members may (paths, steps, pace, sharding hints, the
 * coordinator's cluster settings), and naming the section of any other
 * difference.
 */
static void test_digest(void **state)
{
	(void)state;
	static const char *const base = "{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"f\"]}]";
	static const struct {
		const char *rest; /* after base's tables */
		const char *sections; /* those that differ from base's, "" for none */
	} cases[] = {
		{"}", ""},
		{", \"train\": {\"steps\": 7, \"min_step_ms\": 30}, \"cluster\": {\"precopy\": false}}", ""},
		{", \"train\": {\"global_batch\": 512}}", "train"},
		{", \"train\": {\"seed\": 43}}", "train"},
		{", \"optimizer\": {\"type\": \"adam\"}}", "optimizer"},
		{", \"dense\": {\"lr\": 0.5}, \"data\": {\"seed\": 2}}", "dense, data"},
		{", \"dense\": {\"interaction\": \"dot\"}, \"data\": {\"eval_every\": 3}}", ""}, /* what auto is here */
		{", \"dense\": {\"interaction\": \"cat\"}}", "dense"},
		{", \"train\": {\"deterministic\": false, \"micro_batch\": 8}}", "train"},
		{", \"cluster\": {\"replica_sync\": {\"every\": 4}}}", "cluster"},
		{", \"cluster\": {\"recovery\": \"partial\"}, \"optimizer\": {\"beta1\": 0.5}}", "cluster"},
	};
	char want[RS_CONFIG_DIGEST_LEN + 1], got[RS_CONFIG_DIGEST_LEN + 1], json[512], diff[64];
	rs_config *cfg = parse_ok("{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"f\"]}]}");
	rs_config_digest(cfg, want);
	rs_config_free(cfg);
	assert_true(rs_config_digest_ok(want));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(json, sizeof(json), "%s%s", base, cases[i].rest);
		cfg = parse_ok(json);
		rs_config_digest(cfg, got);
		rs_config_free(cfg);
		rs_config_digest_diff(want, got, diff, sizeof(diff));
		if (strcmp(diff, cases[i].sections) != 0)
			fail_msg("%s: differs in '%s', expected '%s'", json, diff, cases[i].sections);
	}
	/* a table's shape, its features, its ZCH */
	const char *tables[] = {
		"{\"tables\": [{\"name\": \"t\", \"rows\": 101, \"dim\": 8, \"features\": [\"f\"]}]}",
		"{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"g\"]}]}",
		"{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"f\"], \"zch\": {\"buckets\": 4, \"slots\": 100}}]}",
		"{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"f\"], \"pooling_factor\": 3}]}",
	};
	/* another dim: the default bottom MLP's output with it */
	cfg = parse_ok("{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 16, \"features\": [\"f\"]}]}");
	rs_config_digest(cfg, got);
	rs_config_free(cfg);
	assert_int_equal(rs_config_digest_diff(want, got, diff, sizeof(diff)), 2);
	assert_string_equal(diff, "tables, dense");
	/* the sharding hints are the coordinator's */
	cfg = parse_ok("{\"tables\": [{\"name\": \"t\", \"rows\": 100, \"dim\": 8, \"features\": [\"f\"], \"sharding\": \"row_wise\"}]}");
	rs_config_digest(cfg, got);
	rs_config_free(cfg);
	assert_string_equal(got, want);
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		cfg = parse_ok(tables[i]);
		rs_config_digest(cfg, got);
		rs_config_free(cfg);
		assert_int_equal(rs_config_digest_diff(want, got, diff, sizeof(diff)), 1);
		assert_string_equal(diff, "tables");
	}
	const char *bad[] = {"", "0123abcd-0123abcd-0123abcd-0123abcd-0123abcd-0123abc",
			     "0123abcd-0123abcd-0123abcd-0123abcd-0123abcd-0123abcg",
			     "0123abcd+0123abcd-0123abcd-0123abcd-0123abcd-0123abcd",
			     "0123ABCD-0123abcd-0123abcd-0123abcd-0123abcd-0123abcd"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(rs_config_digest_ok(bad[i]));
}

/* jansson allocations fail one at a time: every failure is an error, never a crash or leak. */
static int alloc_countdown = -1;
static void *failing_malloc(size_t n)
{
	if (alloc_countdown == 0)
		return NULL;
	if (alloc_countdown > 0)
		alloc_countdown--;
	return malloc(n);
}

static void test_fail_each_allocation(void **state)
{
	(void)state;
	const char *json = "{\"tables\": [" T1 ", \"colocate\": \"g\"},"
			   "{\"name\": \"b\", \"dim\": 8, \"features\": [\"y\"], \"zch\": {\"slots\": 768}}],"
			   "\"dense\": {\"bottom_mlp\": [4, 8]}, \"data\": {\"seed\": 3}}";
	json_set_alloc_funcs(failing_malloc, free);
	int n;
	for (n = 0; n < 10000; n++) {
		rs_config *cfg = NULL;
		rs_err err = {0};
		alloc_countdown = n;
		rs_status st = rs_config_parse(json, strlen(json), "t.json", &cfg, &err);
		alloc_countdown = -1;
		if (st == RS_OK) {
			rs_config_free(cfg);
			break;
		}
		assert_true(st == RS_ENOMEM || st == RS_EINVAL);
		assert_null(cfg);
	}
	json_set_alloc_funcs(malloc, free);
	assert_true(n > 10); /* the parse really allocates through jansson */
	assert_true(n < 10000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal_gets_defaults),
		cmocka_unit_test(test_every_field),
		cmocka_unit_test(test_bad_configs),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_fail_each_allocation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
