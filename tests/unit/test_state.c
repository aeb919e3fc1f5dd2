/*
 * test_state.c - tests coordinator/state.c: a state written is read back
 * the same; the file is replaced atomically and readable by its owner only;
 * damaged or inconsistent documents are refused naming the field, never
 * crashing; a missing file is RS_ENOTFOUND.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/planner.h"
#include "coordinator/state.h"
#include "tests/unit/scratch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], path[128];

static int setup(void **state)
{
	(void)state;
	if (rs_scratch_make(dir, sizeof(dir), "state") != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/state.json", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return rs_scratch_remove(dir);
}

/* A state in the middle of a 2 -> 3 reshard, with the arrays it points into. Plans are opaque JSON here. */
typedef struct sample_state {
	rs_state s;
	char *world[2], *uni[3];
	int32_t uoo[2];
	uint64_t before[2];
	rs_state_worker w[2];
} sample_state;

static rs_state *sample(sample_state *x)
{
	rs_state *s = &x->s;
	char **world = x->world, **uni = x->uni;
	int32_t *uoo = x->uoo;
	uint64_t *before = x->before;
	rs_state_worker *w = x->w;
	memset(s, 0, sizeof(*s));
	s->phase = RS_STATE_MIGRATING;
	s->generation = 4, s->step = 50, s->bound = 120, s->term = 3, s->last_generation = 6;
	s->plan = json_pack("{s:i}", "world", 2);
	world[0] = "worker-0", world[1] = "worker-1";
	s->world = world, s->nworld = 2;
	s->attempt_generation = 6;
	s->attempt_plan = json_pack("{s:i}", "world", 3);
	uni[0] = "worker-1", uni[1] = "worker-2", uni[2] = "worker-0";
	s->uni = uni, s->nuni = 3, s->attempt_world = 2;
	uoo[0] = 2, uoo[1] = 0;
	s->union_of_old = uoo;
	before[0] = 1, before[1] = UINT64_MAX;
	s->before = before, s->nbefore = 2;
	s->restore = "ck/step-000000040";
	s->attempts = 1, s->next_schedule = 1;
	s->config = "examples/dlrm-small.json", s->url = "ws://127.0.0.1:4000", s->token = "s3cret";
	s->steps = 200;
	s->sched_step[0] = 50, s->sched_workers[0] = 3;
	s->sched_step[1] = 120, s->sched_workers[1] = 2;
	s->nsched = 2;
	s->replicas = 3;
	w[0] = (rs_state_worker){"worker-0", 100};
	w[1] = (rs_state_worker){"worker-1", 101};
	s->workers = w, s->nworkers = 2;
	s->reached = 140;
	s->model = "0123abcd-00000001-00000002-00000003-00000004-ffffffff";
	s->ckpt_dir = "ck", s->ckpt_every = 20, s->ckpt_interval = 600, s->ckpt_keep = 3;
	return s;
}

static void sample_free(sample_state *x)
{
	json_decref(x->s.plan);
	json_decref(x->s.attempt_plan);
}

static void test_round_trip(void **state)
{
	(void)state;
	sample_state x;
	rs_state back, *s = sample(&x);
	rs_err err = {0};
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600); /* it holds the join token */
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	assert_int_not_equal(access(tmp, F_OK), 0);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_int_equal(back.phase, RS_STATE_MIGRATING);
	assert_int_equal(back.generation, 4);
	assert_int_equal(back.step, 50);
	assert_int_equal(back.bound, 120);
	assert_int_equal(back.term, 3);
	assert_int_equal(back.last_generation, 6);
	assert_true(json_equal(back.plan, s->plan));
	assert_true(json_equal(back.attempt_plan, s->attempt_plan));
	assert_int_equal(back.nworld, 2);
	assert_string_equal(back.world[1], "worker-1");
	assert_int_equal(back.nuni, 3);
	assert_string_equal(back.uni[2], "worker-0");
	assert_int_equal(back.attempt_world, 2);
	assert_int_equal(back.union_of_old[0], 2);
	assert_int_equal(back.nbefore, 2);
	assert_true(back.before[1] == UINT64_MAX);
	assert_string_equal(back.restore, "ck/step-000000040");
	assert_int_equal(back.attempts, 1);
	assert_int_equal(back.next_schedule, 1);
	assert_string_equal(back.token, "s3cret");
	assert_null(back.save);
	assert_int_equal(back.nsched, 2);
	assert_int_equal(back.sched_workers[1], 2);
	assert_int_equal(back.nworkers, 2);
	assert_int_equal(back.workers[1].pid, 101);
	assert_int_equal(back.reached, 140);
	assert_string_equal(back.model, s->model);
	assert_string_equal(back.ckpt_dir, "ck");
	assert_int_equal(back.ckpt_every, 20);
	assert_int_equal(back.ckpt_interval, 600);
	assert_int_equal(back.ckpt_keep, 3);
	rs_state_free(&back);
	/* a training state has no attempt */
	s->phase = RS_STATE_TRAINING;
	s->attempt_generation = 0;
	s->save = "/tmp/ckpt";
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_int_equal(back.attempt_generation, 0);
	assert_null(back.uni);
	assert_string_equal(back.save, "/tmp/ckpt");
	rs_state_free(&back);
	/* no checkpoints, nothing known reached, no model digest (an earlier rowshift's): none is written, each reads back as none */
	s->ckpt_dir = NULL, s->reached = 0, s->model = NULL;
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_null(back.ckpt_dir);
	assert_int_equal(back.reached, 0);
	assert_null(back.model);
	rs_state_free(&back);
	/* a failed job's state keeps the reason */
	s->phase = RS_STATE_FAILED;
	s->error = "worker-1 was lost; gave up after 3 recoveries in a row";
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_int_equal(back.phase, RS_STATE_FAILED);
	assert_string_equal(back.error, s->error);
	rs_state_free(&back);
	s->phase = RS_STATE_TRAINING, s->error = NULL;
	/* a state without the join token (a Kubernetes ConfigMap's) has none */
	s->token = NULL;
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_null(back.token);
	rs_state_free(&back);
	sample_free(&x);
}

/* Replace the first occurrence of `from` in the sample's JSON by `to` and parse: it must be refused, naming `field`. */
static void refused(const char *from, const char *to, const char *field)
{
	sample_state x;
	rs_state back;
	rs_err err = {0};
	json_t *j = rs_state_to_json(sample(&x));
	char *text = json_dumps(j, JSON_COMPACT);
	assert_non_null(text);
	char *at = strstr(text, from);
	if (!at)
		fail_msg("'%s' is not in %s", from, text);
	size_t n = strlen(text) + strlen(to) + 1;
	char *edited = malloc(n);
	snprintf(edited, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	rs_status st = rs_state_parse(edited, strlen(edited), "state.json", &back, &err);
	if (st != RS_EINVAL)
		fail_msg("accepted %s", edited);
	if (!strstr(err.msg, field) || !strstr(err.msg, "state.json"))
		fail_msg("'%s' does not name %s", err.msg, field);
	assert_null(back.plan); /* nothing half-filled is left behind */
	free(edited);
	free(text);
	json_decref(j);
	sample_free(&x);
}

static void test_incarnations(void **state)
{
	(void)state;
	sample_state x;
	rs_state back, *s = sample(&x);
	rs_err err = {0};
	char *names[2] = {"worker-0", "worker-2"}, *values[2] = {"0ef28565aea7", "cb872d9663a3"};
	s->inc_names = names, s->inc_values = values, s->ninc = 2;
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	assert_int_equal(rs_state_read(path, &back, &err), RS_OK);
	assert_int_equal(back.ninc, 2);
	assert_string_equal(back.inc_names[1], "worker-2");
	assert_string_equal(back.inc_values[1], "cb872d9663a3");
	rs_state_free(&back);
	values[0] = "\x1b[31mred";
	assert_int_equal(rs_state_write(path, s, &err), RS_OK);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_state_read(path, &back, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "incarnations"));
	sample_free(&x);
}

static void test_refused(void **state)
{
	(void)state;
	refused("\"phase\":\"migrating\"", "\"phase\":\"flying\"", "phase");
	refused("\"phase\":\"migrating\"", "\"phase\":\"migrating\",\"error\":\"x\"", "error"); /* failed only */
	refused("\"phase\":\"migrating\"", "\"phase\":\"training\"", "attempt");   /* an attempt without its phase */
	refused("\"generation\":4", "\"generation\":0", "generation");
	refused("\"step\":50", "\"step\":500", "generation");                      /* past the bound */
	refused("\"world\":[\"worker-0\",\"worker-1\"]", "\"world\":[\"worker-0\",\"worker-0\"]", "world");
	refused("\"world\":[\"worker-0\",\"worker-1\"]", "\"world\":[]", "world");
	refused("\"union_of_old\":[2,0]", "\"union_of_old\":[1,0]", "union_of_old"); /* points at another member */
	refused("\"union_of_old\":[2,0]", "\"union_of_old\":[2]", "union_of_old");
	refused("\"before\":[", "\"before\":[\"x\",", "before");
	refused("\"restore\":\"ck/step-000000040\"", "\"restore\":\"\"", "attempt.restore");
	refused("\"restore\":\"ck/step-000000040\"", "\"restore\":40", "attempt");
	refused("\"generation\":6", "\"generation\":3", "attempt.generation");      /* before the committed one */
	refused("\"world\":2,\"union_of_old\"", "\"world\":4,\"union_of_old\"", "attempt.world");
	refused("[120,2]", "[40,2]", "schedule");                                  /* steps must increase */
	refused("\"pid\":100", "\"pid\":-1", "workers");
	refused("\"token\":\"s3cret\"", "\"token\":\"\"", "job");
	refused("\"next_schedule\":1", "\"next_schedule\":7", "next_schedule");
	refused("\"version\":2", "\"version\":3", "version");
	refused("\"term\":3", "\"term\":-1", "term");
	refused("\"reached\":140", "\"reached\":-1", "reached");
	refused("-ffffffff\"", "-fffffff\"", "model");  /* one digit short */
	refused("-ffffffff\"", "-FFFFFFFF\"", "model"); /* not as rs_config_digest writes it */
	refused("\"keep\":3", "\"keep\":0", "job.checkpoints");
	refused("\"every\":20", "\"every\":-20", "job.checkpoints");
	refused("\"every\":20,\"interval\":600", "\"every\":0,\"interval\":0", "job.checkpoints"); /* checkpoints, but never */
	refused("\"dir\":\"ck\"", "\"dir\":\"\"", "job.checkpoints");
	refused("\"keep\":3", "\"keep\":3,\"extra\":1", "job.checkpoints");
	refused("\"last_generation\":6", "\"last_generation\":4", "last_generation"); /* not past the generation */
	refused("\"plan\":\"", "\"plan\":\"!", "plan");                          /* not base64 */
	refused("\"plan\":\"", "\"plan\":\"AAAA", "plan");                       /* base64, not zlib */
	refused("\"attempts\":1", "\"attempts\":1,\"extra\":true", "extra");        /* unknown keys */
}

static void test_damaged(void **state)
{
	(void)state;
	rs_state back;
	rs_err err = {0};
	static const char *const bad[] = {"", "{", "[]", "null", "{\"format\":\"rowshift-coordinator-state\"}",
					  "\xff\xfe{}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(rs_state_parse(bad[i], strlen(bad[i]), "s", &back, &err), RS_EINVAL);
		assert_true(err.msg[0] != 0);
	}
	/* a truncated file, as a full disk leaves it */
	sample_state x;
	json_t *j = rs_state_to_json(sample(&x));
	char *text = json_dumps(j, JSON_COMPACT);
	for (size_t cut = 0; cut < strlen(text); cut += 7) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(rs_state_parse(text, cut, "s", &back, &err), RS_EINVAL);
	}
	free(text);
	json_decref(j);
	sample_free(&x);
	char missing[160];
	snprintf(missing, sizeof(missing), "%s/none.json", dir);
	assert_int_equal(rs_state_read(missing, &back, &err), RS_ENOTFOUND);
}

/* A version 1 state (plans as JSON objects) is still read. */
static void test_version1(void **state)
{
	(void)state;
	const char *v1 = "{\"format\":\"rowshift-coordinator-state\",\"version\":1,\"phase\":\"training\","
			 "\"generation\":2,\"step\":9,\"bound\":9,\"plan\":{\"world\":{\"ranks\":1}},\"world\":[\"w-0\"],"
			 "\"attempt\":null,\"attempts\":0,\"next_schedule\":0,\"job\":{\"config\":\"c.json\",\"steps\":9,"
			 "\"url\":\"ws://h:1\",\"schedule\":[],\"replicas\":1,\"workers\":[]}}";
	rs_state back;
	rs_err err = {0};
	if (rs_state_parse(v1, strlen(v1), "old.json", &back, &err) != RS_OK)
		fail_msg("%s", err.msg);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(back.plan, "world"), "ranks")), 1);
	rs_state_free(&back);
}

/*
 * The state of a big job fits a ConfigMap (1 MiB of data, as an API server
 * checks it): 2,000 tables on 1,024 workers in the middle of a reshard to
 * 1,023, both plans in it, with room to spare for the rest of the state.
 * With RS_BIG_STATE_OUT it is written there too (k8s_complete.sh stores it
 * in the simulator, which enforces the limit).
 */
/* A local coordinator carries the job of a state on, says it is done, or refuses a command line that contradicts it. */
static void test_local_resume(void **state)
{
	(void)state;
	sample_state x;
	rs_state *s = sample(&x);
	int done = -1;
	rs_err err = {0};
	assert_int_equal(rs_state_local_resume(s, "st.json", NULL, -1, &done, &err), RS_OK);
	assert_int_equal(done, 0);
	assert_int_equal(rs_state_local_resume(s, "st.json", s->config, 999, &done, &err), RS_OK); /* steps: the state's */
	assert_int_equal(done, 0);
	assert_int_equal(rs_state_local_resume(s, "st.json", "other.json", -1, &done, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "--config other.json, but st.json resumes a job of examples/dlrm-small.json"));
	s->phase = RS_STATE_DONE;
	err.msg[0] = 0;
	assert_int_equal(rs_state_local_resume(s, "st.json", s->config, 200, &done, &err), RS_OK);
	assert_int_equal(done, 1);
	assert_string_equal(err.msg, "the job of st.json is done (200 steps): nothing to train (remove the file to start afresh)");
	err.msg[0] = 0;
	assert_int_equal(rs_state_local_resume(s, "st.json", NULL, 300, &done, &err), RS_EINVAL);
	assert_int_equal(done, 0);
	assert_non_null(strstr(err.msg, "--steps 300, but the job of st.json is done, its 200 steps trained"));
	s->token = NULL;
	err.msg[0] = 0;
	assert_int_equal(rs_state_local_resume(s, "st.json", NULL, -1, &done, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "st.json has no join token: not a local job's state"));
	sample_free(&x);
}

static void test_big_job_fits(void **state)
{
	(void)state;
	/* tables of 10^3..10^8 rows, dims 16..128, the planner's choice of sharding (an LCG: the same every run) */
	size_t cap = 2000 * 128 + 256, n = 0;
	char *json = malloc(cap);
	uint64_t x = 7;
	n += (size_t)snprintf(json + n, cap - n, "{\"optimizer\":{\"type\":\"rowwise_adagrad\",\"lr\":0.02},"
					       "\"cluster\":{\"ranks_per_node\":8,\"memory_per_rank\":\"80GiB\"},\"tables\":[");
	for (int t = 0; t < 2000; t++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		long rows = (long)pow(10.0, 3.0 + 5.0 * (double)(x >> 11) / 9007199254740992.0);
		n += (size_t)snprintf(json + n, cap - n, "%s{\"name\":\"t%04d\",\"rows\":%ld,\"dim\":%d,\"features\":[\"f%04d\"],"
						       "\"pooling_factor\":%.2f}", t ? "," : "", t, rows, 16 << (x >> 60 & 3), t,
				      0.5 + (double)(x >> 40 & 0xffff) / 1100.0);
	}
	n += (size_t)snprintf(json + n, cap - n, "]}");
	assert_true(n < cap);
	rs_config *cfg = NULL;
	rs_err err = {0};
	if (rs_config_parse(json, n, "big.json", &cfg, &err) != RS_OK)
		fail_msg("%s", err.msg);
	rs_world w0 = {.ranks = 1024, .ranks_per_node = 8, .memory_per_rank = 80ULL << 30, .sharding_group = 1024};
	rs_world w1 = w0;
	w1.ranks = w1.sharding_group = 1023;
	int32_t removed = 5, map[1024];
	rs_plan *p0 = NULL, *p1 = NULL;
	assert_int_equal(rs_planner_plan(cfg, &w0, NULL, NULL, &p0, &err), RS_OK);
	assert_int_equal(rs_planner_rank_map(1024, 1023, &removed, 1, map, &err), RS_OK);
	assert_int_equal(rs_planner_plan(cfg, &w1, p0, map, &p1, &err), RS_OK);
	sample_state ss;
	rs_state *s = sample(&ss), back;
	json_decref(s->plan), json_decref(s->attempt_plan);
	s->plan = rs_plan_to_json(p0), s->attempt_plan = rs_plan_to_json(p1);
	json_t *root = rs_state_to_json(s);
	char *text = json_dumps(root, JSON_COMPACT), *raw = json_dumps(s->plan, JSON_COMPACT);
	size_t len = strlen(text);
	print_message("state of 2,000 tables on 1,024 -> 1,023 workers: %zu bytes (one plan as JSON: %zu)\n", len,
		      strlen(raw));
	assert_true(len < 512 * 1024); /* well under 1 MiB */
	const char *out = getenv("RS_BIG_STATE_OUT"); /* k8s_complete.sh stores it in the simulator */
	FILE *f = out ? fopen(out, "w") : NULL;
	if (out && (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0))
		fail_msg("cannot write %s", out);
	if (rs_state_parse(text, len, "big", &back, &err) != RS_OK)
		fail_msg("%s", err.msg);
	assert_true(json_equal(back.plan, s->plan));
	assert_true(json_equal(back.attempt_plan, s->attempt_plan));
	rs_state_free(&back);
	free(text), free(raw);
	json_decref(root);
	sample_free(&ss);
	rs_plan_free(p0), rs_plan_free(p1);
	rs_config_free(cfg);
	free(json);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_incarnations),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_damaged),
		cmocka_unit_test(test_version1),
		cmocka_unit_test(test_local_resume),
		cmocka_unit_test(test_big_job_fits),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
