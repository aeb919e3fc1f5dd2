/*
 * job_harness.c - see job_harness.h.
 */
#include "tests/unit/job_harness.h"
#include "tests/unit/scratch.h"
#include "common/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>


job_harness H;


static double fake_now(void) { return H.now; }

static rs_status src_scale(void *ctx, int32_t n, rs_err *err)
{
	(void)ctx, (void)err;
	H.replicas = n;
	H.scales++;
	return RS_OK;
}

static int32_t src_replicas(void *ctx)
{
	(void)ctx;
	return H.replicas;
}

static int src_wanted(void *ctx, const char *name)
{
	(void)ctx;
	int k = atoi(strrchr(name, '-') + 1);
	return k < H.replicas;
}

static void src_ending(void *ctx)
{
	(void)ctx;
	H.ending = 1;
}

static void src_event(void *ctx, int warning, const char *reason, const char *message)
{
	(void)ctx;
	snprintf(H.event, sizeof(H.event), "%s %s: %s", warning ? "Warning" : "Normal", reason, message);
}

static rs_status src_save(void *ctx, const rs_state *s, int patient, rs_err *err)
{
	(void)ctx;
	H.save_tries++;
	H.impatient += !patient;
	if (H.save_fails)
		return rs_err_set(err, RS_EIO, "the disk is full");
	if (H.save_refused)
		return rs_err_set(err, RS_EINVAL, "kubernetes: writing configmap state: HTTP 413: Request entity too large");
	if (H.api_down)
		return rs_err_set(err, RS_ECURL, "kubernetes: PUT /api/v1/namespaces/ns/configmaps/state: Couldn't connect to server");
	assert_true(H.nsaved < 64);
	H.saved[H.nsaved++] = s->phase;
	json_decref(H.state);
	H.state = rs_state_to_json(s);
	assert_non_null(H.state);
	json_decref(H.plan);
	H.plan = json_deep_copy(s->plan);
	assert_non_null(H.plan);
	return RS_OK;
}

rs_conn *conn(int k) { return (rs_conn *)&H.box[k]; }

static rs_status io_send(void *ctx, rs_conn *c, const json_t *msg)
{
	(void)ctx;
	mailbox *b = (mailbox *)c;
	assert_true(b->n < MAX_MAIL);
	b->msg[b->n++] = json_incref((json_t *)msg); /* the job never changes a message it sent (and a copy of each plan for 1,024 members would be gigabytes) */
	return RS_OK;
}

static void io_publish(void *ctx, const json_t *ev)
{
	(void)ctx;
	json_t **at = &H.pub[H.published++ % PUBLISHED_KEPT];
	json_decref(*at);
	*at = json_incref((json_t *)ev); /* the job lets go of it after this call; nothing changes it */
}

const json_t *published(const char *type)
{
	for (int k = 1; k <= PUBLISHED_KEPT && k <= H.published; k++) {
		const json_t *m = H.pub[(H.published - k) % PUBLISHED_KEPT];
		const char *t = json_string_value(json_object_get(m, "type"));
		if (t && !strcmp(t, type))
			return m;
	}
	return NULL;
}

static void io_hold(void *ctx, int hold)
{
	(void)ctx;
	H.held = hold;
}

static int io_clients(void *ctx)
{
	(void)ctx;
	return 0;
}

static const char *io_name(void *ctx, rs_conn *c)
{
	(void)ctx, (void)c;
	return "a test connection";
}

const rs_job_source source = {.scale = src_scale, .replicas = src_replicas, .wanted = src_wanted,
				     .ending = src_ending, .event = src_event, .save_state = src_save};
static const rs_job_io io = {.send = io_send, .publish = io_publish, .hold = io_hold, .status_clients = io_clients,
			     .conn_name = io_name};

void forget_mail(void)
{
	for (int k = 0; k <= WORKERS; k++) {
		for (int i = 0; i < H.box[k].n; i++)
			json_decref(H.box[k].msg[i]);
		H.box[k].n = 0;
	}
}

void set_job(rs_job *j)
{
	H.job = j;
	H.h = rs_job_server_handler(j);
	rs_job_set_io(j, &io);
}

/* A fresh job wanting `workers`, over examples/minimal.json, 100 steps. */
int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	memset(&H, 0, sizeof(H));
	H.now = 1000;
	if (rs_config_load("examples/minimal.json", &H.cfg, &err) != RS_OK)
		return -1;
	/* these tests follow the cycle that moves rows at the pause; pre-copy's is run by the integration tests */
	H.cfg->cluster.precopy = 0;
	H.report = tmpfile();
	H.o = (rs_job_options){.cfg = H.cfg, .config_path = "examples/minimal.json", .url = "ws://127.0.0.1:1",
			       .token = "t", .steps = 100, .debounce_ms = 1000, .timeout_ms = 10000, .max_attempts = 2,
			       .report = H.report, .now = fake_now};
	return 0;
}

int teardown(void **state)
{
	(void)state;
	forget_mail();
	rs_job_destroy(H.job);
	rs_config_free(H.cfg);
	json_decref(H.state);
	json_decref(H.plan);
	for (int k = 0; k < PUBLISHED_KEPT; k++)
		json_decref(H.pub[k]);
	fclose(H.report);
	return 0;
}

void tick(double dt)
{
	H.now += dt;
	rs_job_tick(H.job);
}

void join_as(int k, const char *incarnation)
{
	char name[32], addr[32];
	snprintf(name, sizeof(name), "worker-%d", k);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 2000 + k);
	rs_msg_join j = {.worker = name, .addr = addr, .pid = 100 + k, .incarnation = incarnation}; /* proved by the server */
	H.h.on_join(H.h.ctx, conn(k), &j);
}

void join(int k)
{
	char inc[32];
	snprintf(inc, sizeof(inc), "incarnation-%d", k);
	join_as(k, inc);
}

/* Worker k says msg (stolen). */
void say(int k, json_t *msg)
{
	assert_non_null(msg);
	H.h.on_message(H.h.ctx, conn(k), msg);
	json_decref(msg);
}

/* The last message of this type worker k got, or NULL. */
json_t *last(int k, rs_msg_type type)
{
	for (int i = H.box[k].n - 1; i >= 0; i--)
		if (rs_proto_kind(H.box[k].msg[i]) == type)
			return H.box[k].msg[i];
	return NULL;
}

int64_t field(const json_t *m, const char *key) { return json_integer_value(json_object_get(m, key)); }

void assert_phase(const char *p) { assert_string_equal(rs_job_phase(H.job), p); }

/* How many times the report (stdout of a real coordinator) holds this text. */
int reported_times(const char *text)
{
	char buf[65536];
	fflush(H.report);
	rewind(H.report);
	size_t n = fread(buf, 1, sizeof(buf) - 1, H.report);
	buf[n] = 0;
	int times = 0;
	for (const char *at = buf; (at = strstr(at, text)); at++)
		times++;
	return times;
}

int reported(const char *text) { return reported_times(text) > 0; }

json_t *sums(uint64_t a, uint64_t b)
{
	uint64_t v[NTABLES] = {a, b};
	return rs_proto_checksums_to_json(v, NTABLES);
}

void paused(int k, int64_t gen, int64_t rank, int64_t step, uint64_t a, uint64_t b)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 3000 + k);
	json_t *cs = sums(a, b);
	rs_msg_paused p = {.rank = rank, .generation = gen, .step = step, .addr = addr, .checksum = cs};
	say(k, rs_proto_make_paused(&p));
	json_decref(cs);
}

/* Workers 0..n-1 of generation 1 pause at step 40; worker k's tables checksum 10k+1 and 10k+2. */
void world_paused(int n)
{
	for (int k = 0; k < n; k++)
		paused(k, 1, k, 40, 10 * (uint64_t)k + 1, 10 * (uint64_t)k + 2);
}

void staged(int k, int64_t gen, int ok, int has_rows, uint64_t a, uint64_t b)
{
	json_t *cs = has_rows ? sums(a, b) : NULL;
	rs_msg_staged s = {.generation = gen, .ok = ok, .reason = ok ? NULL : "a chunk failed its CRC", .checksum = cs};
	say(k, rs_proto_make_staged(&s));
	json_decref(cs);
}

/* A job wanting n workers of src, its first tick done (starting: the source asked for them). */
void create(const rs_job_source *src, int n)
{
	rs_job *j;
	rs_err err = {0};
	assert_int_equal(rs_job_create(&H.o, src, n, &j, &err), RS_OK);
	set_job(j);
	tick(0);
}

/* Start a job of n workers and bring it to generation 1, training. */
void start(int n)
{
	create(&source, n);
	assert_phase("starting");
	assert_int_equal(H.replicas, n); /* the source was asked for the workers */
	for (int k = 0; k < n; k++)
		join(k);
	tick(0.01);
	assert_phase("training");
	assert_int_equal(rs_job_generation(H.job), 1);
	for (int k = 0; k < n; k++) {
		json_t *s = last(k, RS_MSG_START);
		assert_non_null(s);
		assert_int_equal(field(s, "rank"), k);
		assert_int_equal(field(s, "world"), n);
		assert_int_equal(field(s, "generation"), 1);
		assert_null(json_object_get(s, "previous_plan"));
	}
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_TRAINING);
}

/*
 * From a training world of `from` (worker-0..from-1), a scale to `to`:
 * joiners join, the world pauses (each old member's rows checksum 10*k+1,
 * 10*k+2), the attempt starts. Ends in MIGRATING with generation 2 sent,
 * every member saying it stages but worker `quiet` (-1: none).
 */
void to_migrating_but(int from, int to, int quiet)
{
	H.replicas = to;
	for (int k = from; k < to; k++)
		join(k);
	tick(0.05);
	tick(0.2); /* a tenth of the debounce, nobody pending: the change is ready */
	for (int k = 0; k < from; k++)
		assert_non_null(last(k, RS_MSG_PAUSE));
	world_paused(from);
	tick(0.01);
	assert_phase("paused");
	tick(0.01);
	assert_phase("migrating");
	int nu = from > to ? from : to;
	for (int k = 0; k < nu; k++) {
		json_t *s = last(k, RS_MSG_START);
		assert_non_null(s);
		assert_int_equal(field(s, "generation"), 2);
		assert_int_equal(field(s, "world"), to);
		assert_int_equal(field(s, "union_world"), nu);
		assert_int_equal(field(s, "first_step"), 40);
		assert_non_null(json_object_get(s, "previous_plan"));
		if (k != quiet)
			say(k, rs_proto_make_generation(RS_MSG_STAGING, 2, 0, NULL));
	}
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_MIGRATING);
	assert_true(reported("generation 2: "));
}

void to_migrating(int from, int to) { to_migrating_but(from, to, -1); }

/* Sums of the old world's per-table checksums (see to_migrating). */
uint64_t before_sum(int from, int t)
{
	uint64_t s = 0;
	for (int k = 0; k < from; k++)
		s += 10 * (uint64_t)k + 1 + (uint64_t)t;
	return s;
}

/* Every member of the new world of `to` stages its share of the old sums; leavers stage without rows. */
void all_staged(int from, int to, uint64_t skew)
{
	uint64_t a = before_sum(from, 0), b = before_sum(from, 1);
	for (int k = 0; k < to; k++)
		staged(k, 2, 1, 1, k ? 0 : a + skew, k ? 0 : b);
	for (int k = to; k < from; k++)
		staged(k, 2, 1, 0, 0, 0);
}

/* A 2-worker job whose 2 -> 3 attempt every member staged: committing. */
void to_committing(void)
{
	start(2);
	to_migrating(2, 3);
	all_staged(2, 3, 0);
	tick(0.01);
	assert_phase("committing");
}

/* A 2-worker job whose 2 -> 3 attempt staged with a checksum mismatch: aborting. */
void to_aborting(void)
{
	start(2);
	to_migrating(2, 3);
	all_staged(2, 3, 1); /* a row lost or counted twice */
	tick(0.01);
	assert_phase("aborting");
}

/* Destroy the job as a killed coordinator would leave it, and recover one from what it persisted last. */
void restart_coordinator(void)
{
	rs_state st;
	rs_err err = {0};
	rs_job *j;
	char *text = json_dumps(H.state, JSON_COMPACT);
	assert_non_null(text);
	assert_int_equal(rs_state_parse(text, strlen(text), "state", &st, &err), RS_OK);
	free(text);
	rs_job_destroy(H.job);
	H.job = NULL;
	forget_mail();
	assert_int_equal(rs_job_recover(&H.o, &source, &st, &j, &err), RS_OK);
	rs_state_free(&st);
	set_job(j);
}

/* The job rolls back (there are no checkpoints here: to step 0) because this was lost. */
void assert_recovering(const char *what)
{
	char want[256];
	assert_phase("recovering");
	snprintf(want, sizeof(want), "recovery: %s", what);
	assert_true(reported(want));
	assert_true(reported("rolling back to the start (step 0)"));
}

/* Worker k comes back as a new process (a restarted pod, a restarted ordinal). */
void rejoin_new(int k)
{
	static int processes;
	char name[32], addr[32], inc[32];
	snprintf(name, sizeof(name), "worker-%d", k);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 3000 + k);
	snprintf(inc, sizeof(inc), "a-new-process-%d", ++processes);
	rs_msg_join j = {.worker = name, .addr = addr, .pid = 200 + processes, .incarnation = inc};
	H.h.on_join(H.h.ctx, conn(k), &j);
}

/* Ranks from..to-1 of generation 1's world report their files of the checkpoint at step (the plan's shards and the dense network's). */
void checkpointed_by(const char *root, int from, int to, int64_t step)
{
	char dir[512], names[64][128];
	rs_ckpt_file_report files[64];
	rs_plan *plan;
	rs_err err = {0};
	rs_checkpoint_step_dir(root, step, dir, sizeof(dir));
	assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
	assert_int_equal(rs_plan_from_json(H.plan, H.cfg, "the plan saved", &plan, &err), RS_OK);
	for (int r = from; r < to; r++) {
		int nf = 0;
		if (r == 0)
			files[nf++] = (rs_ckpt_file_report){"dense.safetensors", 1, 8};
		for (int t = 0; t < H.cfg->ntables; t++)
			for (int k = 0; k < plan->tables[t].nshards; k++) {
				const rs_shard *sh = &plan->tables[t].shards[k];
				if (sh->rank != r || sh->replica != 0)
					continue;
				assert_true(nf < 64);
				rs_checkpoint_shard_file(&H.cfg->tables[t], sh, names[nf], sizeof(names[nf]));
				files[nf] = (rs_ckpt_file_report){names[nf], 2, 16};
				nf++;
			}
		rs_msg_checkpointed m = {.generation = 1, .rank = r, .step = step, .dense_params = r == 0 ? 2 : -1,
					 .files = files, .nfiles = nf};
		say(r, rs_proto_make_checkpointed(&m));
	}
	rs_plan_free(plan);
}

/* Every rank of generation 1's world of n reports its files of the checkpoint at step. */
void checkpointed(const char *root, int n, int64_t step) { checkpointed_by(root, 0, n, step); }

/* The checkpoint at step is complete (its index written). */
int indexed(const char *root, int64_t step)
{
	char dir[512], index[600];
	rs_checkpoint_step_dir(root, step, dir, sizeof(dir));
	snprintf(index, sizeof(index), "%s/index.json", dir);
	return access(index, F_OK) == 0;
}

/* A job of 2 workers taking a checkpoint every 10 steps into a scratch folder (root), the newest keep kept. */
void start_checkpointing(char *root, size_t cap, int64_t keep)
{
	assert_int_equal(rs_scratch_make(root, cap, "job"), 0);
	H.o.ckpt_dir = root, H.o.ckpt_every = 10, H.o.ckpt_keep = keep;
	start(2);
}
