/*
 * member.c - rowshift-member: a worker that speaks the control protocol and
 * trains nothing, for runs of a coordinator with a thousand members on one
 * machine (tests/integration/swarm.sh, tests/bench/bench_swarm.sh). The
 * coordinator starts it as its worker binary (--worker-bin, local mode,
 * the worker's flags), and it joins over the real control channel
 * (common/control.h: the WebSocket client and the token handshake of the
 * worker), then answers as a worker would: "training" at each start, one
 * step trained at once (rank 0 reports it), "paused" with the model's
 * per-table checksums at a pause, "staging" and "staged" at a reshard's
 * start, "committed" at its commit (leaving then when it holds no rows),
 * "done" at the last step, "leave" at SIGTERM. No transport: the address it announces is never
 * connected to.
 *
 * Checksums: member of rank r holds, per table t, the checksum f(r, t);
 * a world of W ranks sums to F(W, t) = sum of f(r, t) for r < W. At a
 * reshard the new rank 0 stages F(old world, t) and the others 0, so the
 * coordinator's check (staged sums equal paused sums) holds exactly when
 * it counted every paused member once and every staged one once.
 *
 * Exit: 0 after "stop", leaving or the last step; 1 on anything a worker
 * would not see (a refused join, a malformed message, a lost coordinator).
 */
#include "common/clock.h"
#include "common/config.h"
#include "common/control.h"
#include "common/log.h"
#include "common/proto.h"

#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_TABLES 4096

typedef struct member {
	rs_control *c;
	char addr[64];
	int ntables;
	/* the generation it trains (gen 0: none yet) */
	int64_t gen, rank, step, steps;
	int last;
	/* the attempt it staged (sgen 0: none) */
	int64_t sgen, srank, sworld, sfirst, ssteps;
	int slast;
	double step_s; /* how long a step takes (ROWSHIFT_MEMBER_STEP_MS, default 20) */
} member;

static volatile sig_atomic_t terminated;

static void on_sigterm(int sig)
{
	(void)sig;
	terminated = 1;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t f(int64_t rank, int t) { return mix((uint64_t)rank * MAX_TABLES + (uint64_t)t + 1); }

/* Send msg (taken); 0 when it could not be queued. */
static int say(member *m, json_t *msg)
{
	rs_status st = msg ? rs_control_send(m->c, msg) : RS_ENOMEM;
	json_decref(msg);
	if (st != RS_OK)
		RS_ERROR("cannot send to the coordinator: %s", rs_status_str(st));
	return st == RS_OK;
}

/* Per table, the sum of f(r, t) over ranks first .. first + count - 1, as JSON (NULL without memory). */
static json_t *checksums(const member *m, int64_t first, int64_t count)
{
	uint64_t v[MAX_TABLES] = {0};
	for (int t = 0; t < m->ntables; t++)
		for (int64_t r = first; r < first + count; r++)
			v[t] += f(r, t);
	return rs_proto_checksums_to_json(v, m->ntables);
}

/* Train this generation from m->step: say so, make one step (rank 0 reports it), "done" at the last. 0: exit. */
static int train(member *m, int *over)
{
	if (!say(m, rs_proto_make_training(m->gen, m->step, NULL)))
		return 0;
	if (m->step >= m->steps)
		return 1; /* at a bound: paused there until told */
	if (rs_control_flush(m->c, 10000) != RS_OK) /* what it said goes out before the step */
		return 0;
	rs_sleep(m->step_s); /* the step */
	m->step++;
	if (m->rank == 0) {
		rs_msg_progress p = {.rank = 0, .step = m->step - 1, .loss = 0.5, .samples_per_s = 1000, .auc = -1,
				     .teacher_auc = -1};
		if (!say(m, rs_proto_make_progress(&p)))
			return 0;
	}
	if (m->step == m->steps && m->last) {
		*over = 1;
		return say(m, rs_proto_make_done(m->gen, m->rank, m->step)) && rs_control_flush(m->c, 10000) == RS_OK;
	}
	return 1;
}

static int paused(member *m)
{
	rs_msg_paused p = {.rank = m->rank, .generation = m->gen, .step = m->step, .addr = m->addr};
	p.checksum = checksums(m, m->rank, 1);
	int ok = p.checksum && say(m, rs_proto_make_paused(&p));
	json_decref(p.checksum);
	return ok;
}

static int on_start(member *m, json_t *msg, int *over)
{
	rs_msg_start s;
	rs_err err = {0};
	if (rs_proto_start(msg, &s, &err) != RS_OK) {
		RS_ERROR("%s", err.msg);
		return 0;
	}
	json_t *tables = json_object_get(s.plan, "tables");
	if (!json_is_array(tables) || json_array_size(tables) > MAX_TABLES) {
		RS_ERROR("start: a plan without its tables");
		return 0;
	}
	m->ntables = (int)json_array_size(tables);
	if (!s.previous_plan) { /* a fresh start */
		m->gen = s.generation, m->rank = s.rank, m->step = s.first_step, m->steps = s.steps;
		m->last = s.last;
		return train(m, over);
	}
	if (s.precopy) {
		RS_ERROR("start: a pre-copied reshard (members announce no address to pre-copy to)");
		return 0;
	}
	m->sgen = s.generation, m->srank = s.rank, m->sworld = s.world, m->sfirst = s.first_step, m->ssteps = s.steps;
	m->slast = s.last;
	if (!say(m, rs_proto_make_generation(RS_MSG_STAGING, s.generation, 0, NULL)))
		return 0;
	rs_msg_staged st = {.generation = s.generation, .ok = 1};
	if (s.rank < s.world) /* in the new world: rank 0 holds the old world's sums, the others nothing */
		st.checksum = checksums(m, 0, s.rank == 0 ? (int64_t)json_array_size(s.union_of_old) : 0);
	int ok = (s.rank >= s.world || st.checksum) && say(m, rs_proto_make_staged(&st));
	json_decref(st.checksum);
	return ok;
}

static int on_commit(member *m, json_t *msg, int *over)
{
	int64_t gen;
	rs_err err = {0};
	if (rs_proto_generation(msg, &gen, NULL, NULL, &err) != RS_OK || gen != m->sgen) {
		RS_ERROR("commit: %s", err.msg[0] ? err.msg : "not of the generation staged here");
		return 0;
	}
	if (!say(m, rs_proto_make_generation(RS_MSG_COMMITTED, gen, 0, NULL)))
		return 0;
	if (m->srank >= m->sworld) { /* its rows handed over: it leaves */
		*over = 1;
		return rs_control_flush(m->c, 10000) == RS_OK;
	}
	m->gen = m->sgen, m->rank = m->srank, m->step = m->sfirst, m->steps = m->ssteps;
	m->last = m->slast;
	m->sgen = 0;
	return train(m, over);
}

static int on_abort(member *m, json_t *msg)
{
	int64_t gen;
	rs_err err = {0};
	if (rs_proto_generation(msg, &gen, NULL, NULL, &err) != RS_OK) {
		RS_ERROR("abort: %s", err.msg);
		return 0;
	}
	if (gen != m->sgen)
		return 1; /* already dropped */
	m->sgen = 0;
	return m->gen ? paused(m) : say(m, rs_proto_make_idle(m->addr));
}

static int on_resume(member *m, json_t *msg, int *over)
{
	rs_msg_resume r;
	rs_err err = {0};
	if (rs_proto_resume(msg, &r, &err) != RS_OK || r.generation != m->gen) {
		RS_ERROR("resume: %s", err.msg[0] ? err.msg : "not of the generation trained here");
		return 0;
	}
	m->steps = r.steps, m->last = r.last;
	return train(m, over);
}

static int handle(member *m, json_t *msg, int *over)
{
	rs_msg_type t = rs_proto_kind(msg);
	switch (t) {
	case RS_MSG_START:
		return on_start(m, msg, over);
	case RS_MSG_PAUSE:
		return paused(m);
	case RS_MSG_COMMIT:
		return on_commit(m, msg, over);
	case RS_MSG_ABORT:
		return on_abort(m, msg);
	case RS_MSG_RESUME:
		return on_resume(m, msg, over);
	case RS_MSG_STOP:
		*over = 1;
		return 1;
	default:
		RS_ERROR("'%s' from the coordinator, which this member does not answer", rs_proto_type(msg));
		return 0;
	}
}

int main(int argc, char **argv)
{
	const char *url = NULL, *name = "member", *config = NULL, *token = getenv("ROWSHIFT_JOIN_TOKEN");
	int timeout_ms = 60000;
	for (int i = 1; i + 1 < argc; i += 2) { /* the worker's flags, as the coordinator passes them; others ignored */
		if (!strcmp(argv[i], "--coordinator"))
			url = argv[i + 1];
		else if (!strcmp(argv[i], "--name"))
			name = argv[i + 1];
		else if (!strcmp(argv[i], "--timeout-ms"))
			timeout_ms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--config"))
			config = argv[i + 1];
	}
	rs_log_init(name, -1);
	if (!url || !token || !config) {
		fprintf(stderr, "usage: ROWSHIFT_JOIN_TOKEN=T rowshift-member --coordinator URL --config FILE [--name N] "
				"[--timeout-ms MS]\n");
		return 2;
	}
	/* a worker's join carries its model config's digest: the coordinator's must be the same */
	char model[RS_CONFIG_DIGEST_LEN + 1];
	rs_config *cfg;
	rs_err cerr = {0};
	if (rs_config_load(config, &cfg, &cerr) != RS_OK) {
		RS_ERROR("%s", cerr.msg);
		return 2;
	}
	rs_config_digest(cfg, model);
	rs_config_free(cfg);
	/* libwebsockets sizes its tables by the descriptor limit: a member needs a few, and a thousand run at once */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 64) {
		rl.rlim_cur = 64;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			RS_WARN("cannot lower the descriptor limit: the member takes more memory");
	}
	struct sigaction sa = {.sa_handler = on_sigterm};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) != 0) {
		fprintf(stderr, "rowshift-member: cannot handle SIGTERM\n");
		return 1;
	}
	member m = {0};
	rs_err err = {0};
	const char *step_ms = getenv("ROWSHIFT_MEMBER_STEP_MS");
	m.step_s = (step_ms ? atof(step_ms) : 20) / 1000.0;
	/* an address no peer connects to: members move no rows */
	snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", 1 + (int)(mix((uint64_t)getpid()) % 65535));
	/* as a worker: a coordinator that is busy (or not up yet) is tried again, backing off, for --timeout-ms */
	double until = rs_now() + timeout_ms / 1000.0, wait = 0.1;
	rs_status st;
	while ((st = rs_control_connect(url, token, name, m.addr, model, timeout_ms, &m.c, &err)) != RS_OK) {
		if (st == RS_EINVAL || rs_now() + wait > until) {
			RS_ERROR("joining %s: %s", url, err.msg);
			return 1;
		}
		rs_sleep(wait * (0.5 + (double)(mix((uint64_t)getpid() ^ (uint64_t)(wait * 1e6)) % 1000) / 1000.0));
		wait = wait < 1 ? wait * 2 : 2;
		err = (rs_err){0};
	}
	int over = 0, ok = 1, left = 0;
	while (ok && !over) {
		json_t *msg = NULL;
		if (terminated && !left) /* as a worker: asks to leave, and hands its rows over first */
			ok = say(&m, rs_proto_make_generation(RS_MSG_LEAVE, 0, 0, "SIGTERM")), left = 1;
		st = rs_control_recv(m.c, 200, &msg);
		if (st == RS_ETIMEDOUT)
			continue; /* a world that trains hears nothing for long */
		if (st != RS_OK) {
			RS_ERROR("the coordinator went away (%s%s%s)", rs_status_str(st), rs_control_why(m.c)[0] ? ": " : "",
				 rs_control_why(m.c));
			ok = 0;
			break;
		}
		ok = handle(&m, msg, &over);
		json_decref(msg);
		malloc_trim(0); /* the plans parsed go back: a thousand members share the machine */
	}
	rs_control_close(m.c);
	return ok ? 0 : 1;
}
