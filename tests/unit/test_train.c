/*
 * test_train.c - tests worker/train.c with worker processes on loopback:
 *   - world-size invariance: the same config trained with 1, 2, 3 and 4
 *     workers, tables of every sharding type, ends with the same weights
 *     (bounded relative difference) and the same loss curve;
 *   - learning: held-out AUC climbs well above 0.5 toward the teacher's;
 *   - a worker killed mid-training makes the others stop with an error;
 *   - a malformed request from a peer fails the step with RS_EPEER (no crash).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/checkpoint.h"
#include "common/plan.h"
#include "common/planner.h"
#include "tests/unit/dumps.h"
#include "tests/unit/world_harness.h"
#include "worker/data.h"
#include "worker/metrics.h"
#include "worker/train.h"
#include "tests/unit/scratch.h"

#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS 30

/* A small model with a table of every sharding type and a ZCH table small enough to evict. */
static const char *config_path = "tests/data/train-model.json";

static rs_config *cfg;
static rs_plan *plan;
static char dir[64];
static int64_t steps;

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_scratch_make(dir, sizeof(dir), "train") != 0)
		return -1;
	return rs_config_load(config_path, &cfg, &err) == RS_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (rs_scratch_remove(dir) != 0)
		return -1;
	rs_config_free(cfg);
	return 0;
}

/* Train `steps` steps; dump weights and (rank 0) the loss curve. */
static int train_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	rs_trainer *tr;
	rs_err err = {0};
	char path[128];
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: transport: %s\n", rank, msg);
		return 100;
	}
	if (rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: trainer: %s\n", rank, err.msg);
		return 101;
	}
	snprintf(path, sizeof(path), "%s/w%d-loss", dir, t->world);
	FILE *lf = rank == 0 ? fopen(path, "w") : NULL;
	for (int64_t s = 0; s < steps; s++) {
		rs_step_stats stats;
		rs_status r = rs_trainer_step(tr, s, &stats, &err);
		if (r != RS_OK) {
			fprintf(stderr, "rank %d step %lld: %s: %s\n", rank, (long long)s, rs_status_str(r), err.msg);
			rs_trainer_destroy(tr);
			return r == RS_EPEER ? 42 : 102;
		}
		if (lf)
			fprintf(lf, "%.9g\n", stats.loss);
	}
	if (lf)
		fclose(lf);
	snprintf(path, sizeof(path), "%s/w%d-r%d", dir, t->world, rank);
	int rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 103;
	rs_trainer_destroy(tr);
	return rc;
}

/* A world of w ranks, planned afresh, each running body: every rank must exit 0. */
static void run_world(int32_t w, rank_body body)
{
	rs_world wd = rs_world_make(cfg, w, 0, 0, 0);
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	world wo = {.n = w, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = body};
	world_run(&wo);
	for (int32_t r = 0; r < w; r++)
		if (wo.exit_code[r] != 0)
			fail_msg("world %d: rank %d exited %d", w, r, wo.exit_code[r]);
	rs_plan_free(plan);
	plan = NULL;
}

static void run(int32_t w) { run_world(w, train_body); }

static void test_world_size_invariance(void **state)
{
	(void)state;
	steps = STEPS;
	size_t nd = 0;
	run(1);
	char tag[16] = "w1";
	float **ref = dumps_assemble(cfg, dir, tag, 1, &nd);
	for (int32_t w = 2; w <= 4; w++) {
		run(w);
		size_t n2 = 0;
		snprintf(tag, sizeof(tag), "w%d", w);
		float **got = dumps_assemble(cfg, dir, tag, w, &n2);
		assert_true(n2 == nd);
		double worst = 0;
		for (int i = 0; i <= cfg->ntables; i++) {
			size_t n = i < cfg->ntables ? (size_t)(cfg->tables[i].rows * cfg->tables[i].dim) : nd;
			double d = dumps_max_rel_diff(ref[i], got[i], n);
			worst = fmax(worst, d);
			if (d > 1e-5)
				fail_msg("world %d: %s differs from 1 worker by %.3g (relative)", w,
					 i < cfg->ntables ? cfg->tables[i].name : "dense", d);
		}
		/* the loss curves agree too */
		char pa[128], pb[128];
		snprintf(pa, sizeof(pa), "%s/w1-loss", dir);
		snprintf(pb, sizeof(pb), "%s/w%d-loss", dir, w);
		FILE *a = fopen(pa, "r"), *b = fopen(pb, "r");
		double la, lb, worst_loss = 0;
		int lines = 0;
		while (fscanf(a, "%lf", &la) == 1 && fscanf(b, "%lf", &lb) == 1) {
			worst_loss = fmax(worst_loss, fabs(la - lb) / la);
			lines++;
		}
		fclose(a);
		fclose(b);
		assert_int_equal(lines, STEPS);
		assert_true(worst_loss < 1e-5);
		print_message("world %d vs 1: max relative weight difference %.3g, loss %.3g\n", w, worst, worst_loss);
		dumps_free(cfg, got);
	}
	dumps_free(cfg, ref);
}

/*
 * Deterministic mode: 1, 2, 3 and 4 workers train to the same bits, with
 * every optimizer, on the model with a table of every sharding type and a
 * ZCH table that evicts; and the loss curves are equal digit for digit.
 * Without it (the last pass, row-wise Adagrad) they are not: the check
 * can tell.
 */
static int same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
	int ca = 0, cb = 0, same = fa && fb;
	while (same && (ca = fgetc(fa)) == (cb = fgetc(fb)) && ca != EOF)
		;
	same = same && ca == cb;
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

static int bitwise_equal_to_w1(int32_t w, size_t nd, float **ref)
{
	char tag[16], pa[128], pb[128];
	size_t n2 = 0;
	snprintf(tag, sizeof(tag), "w%d", w);
	float **got = dumps_assemble(cfg, dir, tag, w, &n2);
	int same = n2 == nd;
	for (int i = 0; same && i <= cfg->ntables; i++) {
		size_t n = i < cfg->ntables ? (size_t)(cfg->tables[i].rows * cfg->tables[i].dim) : nd;
		same = memcmp(ref[i], got[i], sizeof(float) * n) == 0;
	}
	dumps_free(cfg, got);
	snprintf(pa, sizeof(pa), "%s/w1-loss", dir);
	snprintf(pb, sizeof(pb), "%s/w%d-loss", dir, w);
	return same && same_file(pa, pb);
}

static void test_deterministic_is_bitwise(void **state)
{
	(void)state;
	static const rs_optimizer opts[] = {RS_OPT_SGD, RS_OPT_ROWWISE_ADAGRAD, RS_OPT_ADAM, RS_OPT_ROWWISE_ADAGRAD};
	rs_optimizer saved = cfg->optimizer.kind;
	int saved_det = cfg->train.deterministic;
	steps = 40;
	for (size_t o = 0; o < sizeof(opts) / sizeof(opts[0]); o++) {
		int det = o + 1 < sizeof(opts) / sizeof(opts[0]);
		size_t nd = 0;
		cfg->optimizer.kind = opts[o];
		cfg->train.deterministic = det;
		run(1);
		float **ref = dumps_assemble(cfg, dir, "w1", 1, &nd);
		int differs = 0;
		for (int32_t w = 2; w <= 4; w++) {
			run(w);
			int same = bitwise_equal_to_w1(w, nd, ref);
			if (det && !same)
				fail_msg("optimizer %d, deterministic: %d workers differ from 1 worker", (int)opts[o], w);
			differs += !same;
		}
		if (!det && !differs)
			fail_msg("without deterministic mode, 2-4 workers gave 1 worker's bits: the comparison proves nothing");
		print_message("optimizer %d, deterministic %d: %s\n", (int)opts[o], det,
			      differs ? "differ (as expected)" : "1, 2, 3 and 4 workers bitwise equal");
		dumps_free(cfg, ref);
	}
	cfg->optimizer.kind = saved;
	cfg->train.deterministic = saved_det;
}

/* More ranks than micro-batches: the ranks beyond train no samples (an empty slice) and the bits stay 1 worker's. */
static void test_deterministic_idle_ranks(void **state)
{
	(void)state;
	int64_t saved_mb = cfg->train.micro_batch;
	int saved_det = cfg->train.deterministic;
	size_t nd = 0;
	cfg->train.deterministic = 1;
	cfg->train.micro_batch = cfg->train.global_batch / 2; /* 2 micro-batches for 3 ranks */
	steps = 20;
	run(1);
	float **ref = dumps_assemble(cfg, dir, "w1", 1, &nd);
	run(3);
	int same = bitwise_equal_to_w1(3, nd, ref);
	dumps_free(cfg, ref);
	cfg->train.micro_batch = saved_mb;
	cfg->train.deterministic = saved_det;
	assert_true(same);
}

static double learned_auc;

static int learn_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	rs_trainer *tr;
	rs_err err = {0};
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
		return 100;
	double auc0, auc, ll;
	if (rs_trainer_evaluate(tr, 8192, &auc0, &ll, NULL) != RS_OK)
		return 101;
	for (int64_t s = 0; s < 300; s++)
		if (rs_trainer_step(tr, s, NULL, NULL) != RS_OK)
			return 102;
	if (rs_trainer_evaluate(tr, 8192, &auc, &ll, NULL) != RS_OK)
		return 103;
	rs_trainer_destroy(tr);
	if (rank == 0)
		fprintf(stderr, "AUC before %.4f, after 300 steps %.4f (log loss %.4f)\n", auc0, auc, ll);
	return auc > 0.68 && auc > auc0 + 0.1 ? 0 : 50;
}

static void test_learns_toward_the_teacher(void **state)
{
	(void)state;
	rs_data *d;
	rs_err err = {0};
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_OK);
	rs_batch b;
	assert_int_equal(rs_batch_init(&b, d->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(d, RS_EVAL_BASE, 8192, &b), RS_OK);
	float *p = malloc(sizeof(float) * 8192);
	for (int i = 0; i < 8192; i++)
		p[i] = (float)d->ops->teacher_prob(d, RS_EVAL_BASE + i);
	double teacher = rs_auc(p, b.labels, 8192);
	print_message("teacher AUC (the ceiling): %.4f\n", teacher);
	free(p);
	rs_batch_free(&b);
	rs_data_close(d);
	rs_world wd = rs_world_make(cfg, 2, 0, 0, 0);
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	world wo = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = learn_body};
	world_run(&wo);
	rs_plan_free(plan);
	plan = NULL;
	assert_int_equal(wo.exit_code[0], 0);
	assert_int_equal(wo.exit_code[1], 0);
	(void)learned_auc;
}

static int dying_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	rs_trainer *tr;
	rs_err err = {0};
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
		return 100;
	for (int64_t s = 0; s < 1000; s++) {
		if (rank == 2 && s == 5)
			raise(SIGKILL);
		rs_status r = rs_trainer_step(tr, s, NULL, &err);
		if (r != RS_OK) {
			fprintf(stderr, "rank %d stopped at step %lld: %s\n", rank, (long long)s, err.msg);
			rs_trainer_destroy(tr);
			return r == RS_EPEER ? 42 : 43;
		}
	}
	return 44;
}

static void test_killed_worker_stops_the_others(void **state)
{
	(void)state;
	rs_world wd = rs_world_make(cfg, 3, 0, 0, 0);
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	world wo = {.n = 3, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = dying_body};
	double t0 = world_now();
	world_run(&wo);
	rs_plan_free(plan);
	plan = NULL;
	assert_int_equal(wo.exit_code[2], -SIGKILL);
	assert_int_equal(wo.exit_code[0], 42);
	assert_int_equal(wo.exit_code[1], 42);
	print_message("the others stopped %.2f s after the kill\n", world_now() - t0);
}

/* A feature of a plain (not ZCH, not data-parallel) table: requests for it go to the rows' owners. */
static int64_t plain_feature(void)
{
	int64_t f = 0;
	for (int t = 0; t < cfg->ntables; f += cfg->tables[t].nfeatures, t++)
		if (!cfg->tables[t].has_zch && plan->tables[t].sharding != RS_SHARD_DP)
			return f;
	return -1;
}

static int64_t bad_request[5]; /* what rank 1 sends rank 0 in place of its requests */

/* Rank 0 trains a step; rank 1 answers the request all-to-all with bad_request. */
static const char *hostile_says; /* what rank 0's refusal must say, or NULL */

static int hostile_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	if (st != RS_OK)
		return 100;
	if (rank == 0) {
		rs_trainer *tr;
		rs_err err = {0};
		if (rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
			return 101;
		rs_status r = rs_trainer_step(tr, 0, NULL, &err);
		rs_trainer_destroy(tr);
		if (r == RS_EPEER && hostile_says && !strstr(err.msg, hostile_says)) {
			fprintf(stderr, "refused, but saying '%s' (wanted '%s')\n", err.msg, hostile_says);
			return 61;
		}
		return r == RS_EPEER ? 0 : 60;
	}
	size_t sc[2] = {sizeof(bad_request), 0}, rc[2];
	if (rs_transport_alltoall_counts(t, sc, rc) != RS_OK)
		return 102;
	void *in = malloc(rc[0] + rc[1] + 1);
	st = in ? rs_transport_alltoallv(t, bad_request, sc, in, rc) : RS_ENOMEM;
	free(in);
	return st == RS_OK ? 0 : 103;
}

static void test_malformed_request_is_refused(void **state)
{
	(void)state;
	rs_world wd = rs_world_make(cfg, 2, 0, 0, 0);
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	int64_t f = plain_feature();
	assert_true(f >= 0);
	/* [feature, block, sample, n, id] */
	const int64_t cases[][5] = {
		{(int64_t)1 << 40, 0, 0, 1, 5}, /* no such feature */
		{f, 99, 0, 1, 5},               /* no such column block */
		{f, 0, 0, 1000, 5},             /* more ids than the message holds */
		{f, 0, 0, -3, 5},               /* a negative count */
		{f, 0, 0, 1, 1000000000},       /* a row no shard here holds */
		{f, 0, -1, 1, 5},               /* answers id by id, to a worker in plain mode (the last case) */
	};
	int saved_det = cfg->train.deterministic;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		memcpy(bad_request, cases[k], sizeof(bad_request));
		int last = k + 1 == sizeof(cases) / sizeof(cases[0]);
		cfg->train.deterministic = last ? 0 : saved_det;
		hostile_says = last ? "\"deterministic\": false" : NULL;
		world wo = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1,
			    .reap_last = -1, .body = hostile_body};
		world_run(&wo);
		if (wo.exit_code[0] != 0 || wo.exit_code[1] != 0)
			fail_msg("case %zu: rank 0 exited %d, rank 1 %d", k, wo.exit_code[0], wo.exit_code[1]);
	}
	cfg->train.deterministic = saved_det;
	hostile_says = NULL;
	rs_plan_free(plan);
	plan = NULL;
}

/* Entries of directory d (0 when it cannot be read). */
static int entries(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

/* A trainer made for a load (no initial values), loaded from dir, holds tr's model (at step): 0, else a code. */
static int loads_as(rs_trainer *tr, rs_transport *t, const char *from, int64_t want_step, rs_err *err)
{
	rs_trainer *back;
	uint64_t a[16] = {0}, b[16] = {0};
	int64_t step = -1;
	if (rs_trainer_create_for_load(cfg, plan, t, NULL, &back, err) != RS_OK)
		return 1;
	int code = rs_trainer_load(back, from, &step, err) != RS_OK || step != want_step ? 2 : 0;
	if (!code) {
		rs_trainer_checksum(tr, a);
		rs_trainer_checksum(back, b);
		code = memcmp(a, b, sizeof(a)) ? 3 : 0;
	}
	rs_trainer_destroy(back);
	return code;
}

/*
 * One rank: a snapshot cancelled before its write writes nothing (RS_EABORTED);
 * a trainer made for a load (no initial values) and loaded holds the saved
 * model; a snapshot taken into an earlier one's memory (two steps later)
 * writes the model as it is then.
 */
static int snapshot_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)rank, (void)msg;
	rs_trainer *tr;
	rs_snapshot *s, *again = NULL;
	rs_err err = {0};
	char snap[128], saved[128], reused[128];
	snprintf(snap, sizeof(snap), "%s/snapshot-%d", dir, (int)cfg->optimizer.kind);
	snprintf(saved, sizeof(saved), "%s/saved-%d", dir, (int)cfg->optimizer.kind);
	snprintf(reused, sizeof(reused), "%s/reused-%d", dir, (int)cfg->optimizer.kind);
	if (st != RS_OK || mkdir(snap, 0700) != 0 || mkdir(saved, 0700) != 0 || mkdir(reused, 0700) != 0 ||
	    rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
		return 100;
	for (int64_t k = 0; k < 3; k++)
		if (rs_trainer_step(tr, k, NULL, NULL) != RS_OK)
			return 101;
	if (rs_trainer_snapshot(tr, NULL, &s, &err) != RS_OK)
		return 102;
	size_t bytes = rs_snapshot_bytes(s);
	rs_snapshot_cancel(s);
	rs_status w = rs_snapshot_write(s, snap, &err);
	err.msg[0] = 0;
	int code = w != RS_EABORTED ? 103 : entries(snap) != 0 ? 104 : 0;
	if (!code && rs_trainer_save(tr, saved, 3, &err) != RS_OK)
		code = 105;
	if (!code && loads_as(tr, t, saved, 3, &err))
		code = 106;
	for (int64_t k = 3; !code && k < 5; k++)
		if (rs_trainer_step(tr, k, NULL, NULL) != RS_OK)
			code = 107;
	if (!code) {
		rs_status got = rs_trainer_snapshot(tr, s, &again, &err); /* s, of step 3, taken over */
		s = NULL;
		code = got != RS_OK ? 108 : 0;
	}
	/* every copy went into s's memory (the same sizes), and the index names each file's checksum */
	if (!code && (rs_snapshot_bytes(again) != bytes || rs_snapshot_reused(again) != bytes ||
		      rs_snapshot_write(again, reused, &err) != RS_OK))
		code = 109;
	json_t *sums = code ? NULL : json_object();
	const rs_ckpt_file_report *files;
	int nfiles = code ? 0 : rs_snapshot_files(again, &files);
	if (!code && (!sums || rs_checkpoint_sums_add(sums, files, nfiles) != RS_OK ||
		      rs_checkpoint_write_index(reused, cfg, plan, 5, (size_t)rs_snapshot_dense_params(again), sums,
						&err) != RS_OK))
		code = 111;
	json_decref(sums);
	if (!code && loads_as(tr, t, reused, 5, &err))
		code = 110;
	if (code)
		fprintf(stderr, "snapshot_body: %d: %s\n", code, err.msg);
	rs_snapshot_free(s);
	rs_snapshot_free(again);
	rs_trainer_destroy(tr);
	return code;
}

/*
 * A final save that fails on one rank fails on every rank (none would say
 * "done"), and leaves no index naming a model that is not whole. Two ways:
 * rank 1 cannot write its part (an earlier save's index, removed first, is
 * not replaced), or rank 0 cannot remove the earlier index (no rank writes).
 */
static int drop_fails;    /* 0: rank 1's part fails, 1: rank 0's removal of the earlier index */
static char save_dir[128]; /* where the ranks save */

static int save_fail_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	rs_trainer *tr;
	rs_err err = {0};
	char bad[160];
	snprintf(bad, sizeof(bad), "%s/not-a-dir/save", save_dir); /* under a regular file: cannot be made */
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
		return 100;
	if (rs_trainer_step(tr, 0, NULL, NULL) != RS_OK)
		return 101;
	rs_status saved = rs_trainer_save(tr, rank == 1 && !drop_fails ? bad : save_dir, 1, &err);
	rs_trainer_destroy(tr);
	if (saved == RS_OK)
		return 102;
	if (drop_fails)
		return strstr(err.msg, rank == 0 ? "index.json" : "other rank(s) could not remove the earlier index") ? 0
														   : 103;
	return rank == 0 && !strstr(err.msg, "other rank(s) could not write their part") ? 103 : 0;
}

static void save_fails(const char *name, int drop)
{
	char path[200];
	snprintf(save_dir, sizeof(save_dir), "%s/%s", dir, name);
	assert_int_equal(mkdir(save_dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/not-a-dir", save_dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/index.json", save_dir); /* an earlier save's */
	if (drop) { /* one that cannot be removed */
		assert_int_equal(mkdir(path, 0700), 0);
		snprintf(path, sizeof(path), "%s/index.json/x", save_dir);
	}
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"format\": \"rowshift-checkpoint\"}\n", f);
	fclose(f);
	drop_fails = drop;
	run_world(2, save_fail_body);
	DIR *d = opendir(save_dir);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		if (!drop && !strcmp(e->d_name, "index.json"))
			fail_msg("%s/index.json: an index naming a model that is not whole", save_dir);
		if (drop && e->d_name[0] != '.' && strcmp(e->d_name, "index.json") && strcmp(e->d_name, "not-a-dir"))
			fail_msg("%s/%s written after the earlier index could not be removed", save_dir, e->d_name);
	}
	closedir(d);
}

static void test_a_failed_save_fails_every_rank(void **state)
{
	(void)state;
	save_fails("save-fail", 0);
}

static void test_an_index_that_cannot_go_stops_every_rank(void **state)
{
	(void)state;
	save_fails("save-stuck", 1);
}

/*
 * One rank's part of the final save takes longer than the transport's
 * bound (its writer stalls 1 s; the bound is 0.3 s): the others wait for it
 * when the parts at the floor's speed take longer (40 kB/s: about 5 s for
 * this model), and the bound is back after; they do not when the parts take
 * less (1 GB/s: the save's bound stays about 0.3 s).
 */
static int64_t slow_floor; /* bytes/s */

static int slow_save_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	rs_trainer *tr;
	rs_err err = {0};
	char path[160];
	snprintf(path, sizeof(path), "%s/save-slow-%lld", dir, (long long)slow_floor);
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK)
		return 100;
	if (rs_trainer_step(tr, 0, NULL, NULL) != RS_OK)
		return 101;
	rs_transport_timeout(t, 300);
	rs_save_floor_bytes_per_s_for_tests = slow_floor;
	if (rank == 1)
		rs_checkpoint_stall_ms_for_tests = 1000;
	st = rs_trainer_save(tr, path, 1, &err);
	rs_trainer_destroy(tr);
	if (st != RS_OK)
		fprintf(stderr, "rank %d: %s\n", rank, err.msg);
	if (slow_floor > 1000000) /* rank 0 gives up on rank 1 */
		return st == RS_OK ? 104 : rank == 0 && st != RS_ETIMEDOUT ? 105 : 0;
	return st != RS_OK ? 102 : rs_transport_timeout(t, 0) != 300 ? 103 : 0;
}

static void slow_save(int64_t floor)
{
	char path[128];
	slow_floor = floor;
	snprintf(path, sizeof(path), "%s/save-slow-%lld", dir, (long long)floor);
	assert_int_equal(mkdir(path, 0700), 0);
	run_world(2, slow_save_body);
	snprintf(path, sizeof(path), "%s/save-slow-%lld/index.json", dir, (long long)floor);
	assert_int_equal(access(path, F_OK), floor > 1000000 ? -1 : 0);
}

static void test_a_slow_rank_is_waited_for(void **state)
{
	(void)state;
	slow_save(40000);
}

static void test_a_slower_rank_is_given_up_on(void **state)
{
	(void)state;
	slow_save(1000000000);
}

static void test_snapshot_cancel_and_load(void **state)
{
	(void)state;
	rs_err err = {0};
	assert_true(cfg->ntables <= 16);
	rs_world wd = rs_world_make(cfg, 1, 0, 0, 0);
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	/* every optimizer: an Adam shard of the ZCH table is a file of five tensors, the most there are */
	static const rs_optimizer opts[] = {RS_OPT_SGD, RS_OPT_ROWWISE_ADAGRAD, RS_OPT_ADAM};
	rs_optimizer saved = cfg->optimizer.kind;
	for (size_t o = 0; o < sizeof(opts) / sizeof(opts[0]); o++) {
		cfg->optimizer.kind = opts[o];
		world wo = {.n = 1, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1,
			    .reap_last = -1, .body = snapshot_body};
		world_run(&wo);
		if (wo.exit_code[0] != 0)
			fail_msg("optimizer %d: the snapshot's body exited %d", (int)opts[o], wo.exit_code[0]);
	}
	cfg->optimizer.kind = saved;
	rs_plan_free(plan);
	plan = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_world_size_invariance),
		cmocka_unit_test(test_deterministic_is_bitwise),
		cmocka_unit_test(test_deterministic_idle_ranks),
		cmocka_unit_test(test_learns_toward_the_teacher),
		cmocka_unit_test(test_killed_worker_stops_the_others),
		cmocka_unit_test(test_a_failed_save_fails_every_rank),
		cmocka_unit_test(test_an_index_that_cannot_go_stops_every_rank),
		cmocka_unit_test(test_a_slow_rank_is_waited_for),
		cmocka_unit_test(test_a_slower_rank_is_given_up_on),
		cmocka_unit_test(test_malformed_request_is_refused),
		cmocka_unit_test(test_snapshot_cancel_and_load),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
