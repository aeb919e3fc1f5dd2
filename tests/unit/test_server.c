/*
 * test_server.c - tests coordinator/server.c and server_status.c: a real
 * server on a loopback port, serviced by a thread of its own, against raw
 * peers (tests/unit/ws_raw.h) playing what an unauthenticated or hostile
 * client may do, and against the workers' own client (common/control.h).
 * Each test gets a fresh server. Waits are bounded (WSR_TIMEOUT_S) and only
 * tell a hang from a finish; nothing here asserts how fast anything is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/clock.h"
#include "common/control.h"
#include "common/proto.h"
#include "common/wsmsg.h"
#include "coordinator/server.h"
#include "tests/unit/ws_raw.h"
#include "worker/link.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define TOKEN "unit-test-join-token-0123456789abcdef"

static struct {
	rs_server *srv;
	pthread_t thread;
	int port;
	char url[64];
	atomic_int stop;
	atomic_int to_publish;     /* events the server thread is asked to publish */
	atomic_int published;      /* events published so far (the snapshot says how many it includes) */
	atomic_int joins;
	atomic_int messages;       /* messages from joined workers */
	atomic_int clients;        /* rs_server_status_clients, as the server thread last saw it */
	atomic_ulong built;        /* rs_server_snapshots_built, likewise */
	size_t snapshot_pad;       /* bytes of padding in each snapshot */
	size_t after_welcome;      /* on a join, send a message this large at once (0: none) */
	atomic_int frozen;         /* the server thread services nothing while set (a coordinator busy elsewhere) */
	atomic_int hold;           /* rs_server_status_hold, applied before each round of publishing */
} S;

static void on_join(void *ctx, rs_conn *c, const rs_msg_join *j)
{
	(void)ctx, (void)j;
	atomic_fetch_add(&S.joins, 1);
	if (!S.after_welcome)
		return;
	char *pad = malloc(S.after_welcome + 1);
	assert_non_null(pad);
	memset(pad, 'p', S.after_welcome);
	pad[S.after_welcome] = 0;
	json_t *m = json_pack("{s:s, s:s}", "type", "big", "pad", pad);
	assert_int_equal(rs_server_send(c, m), RS_OK);
	json_decref(m);
	free(pad);
}

static void on_message(void *ctx, rs_conn *c, json_t *msg)
{
	(void)ctx, (void)c, (void)msg;
	atomic_fetch_add(&S.messages, 1);
}

/* The snapshot says how many events it includes; it is padded to make it large. */
static json_t *snapshot(void *ctx)
{
	(void)ctx;
	char *pad = calloc(S.snapshot_pad + 1, 1);
	assert_non_null(pad);
	memset(pad, 's', S.snapshot_pad);
	json_t *j = json_pack("{s:s, s:i, s:s}", "type", "snapshot", "published", atomic_load(&S.published), "pad", pad);
	free(pad);
	return j;
}

static void *serve(void *arg)
{
	(void)arg;
	while (!atomic_load(&S.stop)) {
		if (atomic_load(&S.frozen)) {
			rs_sleep(0.01);
			continue;
		}
		rs_server_service(S.srv, 5);
		/* the events asked for first: a test sets the hold before it asks for events to publish under it */
		int n = atomic_load(&S.to_publish);
		rs_server_status_hold(S.srv, atomic_load(&S.hold));
		for (; n > 0; n--, atomic_fetch_sub(&S.to_publish, 1)) {
			json_t *e = json_pack("{s:s, s:i}", "type", "event", "n", atomic_load(&S.published) + 1);
			atomic_fetch_add(&S.published, 1);
			rs_server_publish(S.srv, e);
			json_decref(e);
		}
		atomic_store(&S.clients, rs_server_status_clients(S.srv));
		atomic_store(&S.built, rs_server_snapshots_built(S.srv));
	}
	return NULL;
}

/* The job's model config digest (rs_config_digest's form) */
#define MODEL "0000000a-0000000b-0000000c-0000000d-0000000e-0000000f"

static int start_term(const char *hosts, int64_t term)
{
	rs_server_handler h = {.on_join = on_join, .on_message = on_message, .status_snapshot = snapshot};
	rs_err err = {0};
	S.snapshot_pad = 100;
	rs_server_opts o = {.listen = "127.0.0.1:0", .token = TOKEN, .model = MODEL, .hosts = hosts, .term = term,
			    .max_unjoined = 64};
	if (rs_server_create(&o, &h, &S.srv, &err) != RS_OK)
		return -1;
	S.port = rs_server_port(S.srv);
	snprintf(S.url, sizeof(S.url), "ws://127.0.0.1:%d", S.port);
	return pthread_create(&S.thread, NULL, serve, NULL) == 0 ? 0 : -1;
}

static int start(const char *hosts) { return start_term(hosts, 0); }

static int setup(void **state)
{
	(void)state;
	memset(&S, 0, sizeof(S));
	return start(NULL);
}

static int setup_hosts(void **state)
{
	(void)state;
	memset(&S, 0, sizeof(S));
	return start("coord.example,other.example");
}

static int teardown(void **state)
{
	(void)state;
	atomic_store(&S.stop, 1);
	pthread_join(S.thread, NULL);
	rs_server_destroy(S.srv);
	rs_ws_set_idle_policy(RS_WS_PING_S, RS_WS_HANGUP_S); /* test_idle_policy's shorter one, even when it failed */
	return 0;
}

/* Wait (bounded) until *v reaches want. */
static int wait_for(atomic_int *v, int want)
{
	for (double until = rs_now() + WSR_TIMEOUT_S; rs_now() < until; rs_sleep(0.005))
		if (atomic_load(v) >= want)
			return 1;
	return 0;
}

/* A raw control connection, upgraded, its challenge read into *challenge (a new reference). */
static int control_conn(json_t **challenge)
{
	size_t n;
	int fd = wsr_connect(S.port, 0);
	assert_true(fd >= 0);
	assert_int_equal(wsr_upgrade(fd, "/", "rowshift-control", "127.0.0.1", NULL, NULL), 101);
	char *text = wsr_recv(fd, &n, 4096);
	assert_non_null(text);
	*challenge = json_loads(text, 0, NULL);
	assert_non_null(*challenge);
	free(text);
	return fd;
}

/* A join answering challenge with a proof made with token, as JSON text (malloc'd); extra: a key to add. */
static char *join_text(json_t *challenge, const char *token, const char *extra_key)
{
	const char *nonce, *epoch_only;
	rs_err err = {0};
	char mine[RS_AUTH_NONCE_HEX + 1], proof[RS_AUTH_PROOF_HEX + 1], epoch[RS_AUTH_NONCE_HEX + 32];
	int64_t term;
	assert_int_equal(rs_proto_challenge(challenge, &nonce, &epoch_only, &term, &err), RS_OK);
	rs_proto_bound_epoch(epoch_only, term, epoch, sizeof(epoch));
	assert_int_equal(rs_auth_nonce(mine), RS_OK);
	rs_msg_join j = {.worker = "tester", .addr = "", .pid = 1, .incarnation = "", .nonce = mine, .proof = proof};
	assert_int_equal(rs_proto_join_proof(token, nonce, epoch, &j, proof), RS_OK);
	json_t *m = rs_proto_make_join(&j);
	if (extra_key)
		json_object_set_new(m, extra_key, json_integer(1));
	char *text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	return text;
}

/* The next message on fd, parsed (a new reference), or NULL. */
static json_t *next_json(int fd, size_t max)
{
	size_t n;
	char *text = wsr_recv(fd, &n, max);
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	return j;
}

/*
 * A worker whose model config is not the job's is refused for good, the
 * sections that differ named, and so is a worker's join (one naming its
 * transport address) without a digest; the same digest joins, and a tool's
 * join (no address) carries none. The good join goes first: once a
 * coordinator proved itself in this process, only a refusal carrying its
 * proof is RS_EINVAL (an unsigned one is RS_EPEER), so the refusals below
 * are checked as signed whatever ran before.
 */
static void test_join_with_another_model(void **state)
{
	(void)state;
	rs_control *c = NULL;
	rs_err err = {0};
	assert_int_equal(rs_control_connect(S.url, TOKEN, "w", "", MODEL, 5000, &c, &err), RS_OK);
	rs_control_close(c);
	c = NULL;
	assert_int_equal(atomic_load(&S.joins), 1);
	assert_int_equal(rs_control_connect(S.url, TOKEN, "w", "", "0000000a-0000000b-000000ff-0000000d-000000ff-0000000f", 5000,
					    &c, &err), RS_EINVAL);
	assert_null(c);
	if (!strstr(err.msg, "its model config differs from the coordinator's in dense, train"))
		fail_msg("%s", err.msg);
	err = (rs_err){0};
	assert_int_equal(rs_control_connect(S.url, TOKEN, "w", "127.0.0.1:1", NULL, 5000, &c, &err), RS_EINVAL);
	assert_null(c);
	if (!strstr(err.msg, "a worker's join must carry its model config's digest"))
		fail_msg("%s", err.msg);
	assert_int_equal(atomic_load(&S.joins), 1);
	assert_int_equal(rs_control_connect(S.url, TOKEN, "rowshiftctl", "", NULL, 5000, &c, &err), RS_OK);
	rs_control_close(c);
	assert_int_equal(atomic_load(&S.joins), 2);
}

/* Idle connections, however many, never lock out a joiner: past the cap (64 here) the oldest goes. */
static void test_join_past_idle_connections(void **state)
{
	(void)state;
	enum { IDLE = 100 };
	int fd[IDLE];
	for (int i = 0; i < IDLE; i++) {
		fd[i] = wsr_connect(S.port, 0);
		assert_true(fd[i] >= 0);
		assert_int_equal(wsr_upgrade(fd[i], "/", "rowshift-control", "127.0.0.1", NULL, NULL), 101);
	}
	rs_control *c = NULL;
	rs_err err = {0};
	assert_int_equal(rs_control_connect(S.url, TOKEN, "tester", "", NULL, 5000, &c, &err), RS_OK);
	assert_int_equal(atomic_load(&S.joins), 1);
	rs_control_close(c);
	assert_true(wsr_closed(fd[0])); /* the oldest made room */
	for (int i = 0; i < IDLE; i++)
		close(fd[i]);
}

/* A wrong proof is refused without the coordinator's proof (it would sign for a stranger), and closed. */
static void test_refusal_is_unsigned(void **state)
{
	(void)state;
	json_t *challenge;
	int fd = control_conn(&challenge);
	char *join = join_text(challenge, "not-the-token", NULL);
	assert_int_equal(wsr_send(fd, join, strlen(join), 1), 0);
	json_t *r = next_json(fd, 4096);
	assert_non_null(r);
	assert_string_equal(rs_proto_type(r), "refused");
	assert_string_equal(json_string_value(json_object_get(r, "reason")), "bad join token");
	assert_null(json_object_get(r, "proof"));
	assert_true(wsr_closed(fd));
	json_decref(r);
	free(join);
	json_decref(challenge);
	close(fd);
	assert_int_equal(atomic_load(&S.joins), 0);
}

/* Before the join, the first message is the only one: malformed JSON or another message is refused and closed. */
static void test_first_message_only(void **state)
{
	(void)state;
	static const char *const first[] = {"{this is not json", "{\"type\":\"progress\",\"rank\":0,\"step\":1}", "[1,2]"};
	for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
		json_t *challenge;
		int fd = control_conn(&challenge);
		assert_int_equal(wsr_send(fd, first[i], strlen(first[i]), 1), 0);
		json_t *r = next_json(fd, 4096);
		assert_non_null(r);
		assert_string_equal(rs_proto_type(r), "refused");
		assert_true(wsr_closed(fd));
		json_decref(r);
		json_decref(challenge);
		close(fd);
	}
}

/* Redirect this process's stderr (where rs_log writes) to a file; returns the saved descriptor. */
static int capture_log(const char *path)
{
	fflush(stderr);
	int saved = dup(2), f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && f >= 0);
	assert_true(dup2(f, 2) == 2);
	close(f);
	return saved;
}

static void restore_log(int saved)
{
	fflush(stderr);
	assert_true(dup2(saved, 2) == 2);
	close(saved);
}

/* Lines of path that contain what (all lines: NULL); starts: lines that begin with it instead. */
static int count_lines(const char *path, const char *what, int starts)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += !what || (starts ? !strncmp(line, what, strlen(what)) : strstr(line, what) != NULL);
	fclose(f);
	return n;
}

/* A flood of refusals (malformed joins, foreign pages) is logged at a bounded rate, not line by line. */
static void test_refusal_log_is_rate_limited(void **state)
{
	(void)state;
	enum { FLOOD = 100 };
	char path[] = "/tmp/rs_test_server_log_XXXXXX";
	int tmp = mkstemp(path);
	assert_true(tmp >= 0);
	close(tmp);
	int saved = capture_log(path);
	double t0 = rs_now();
	for (int i = 0; i < FLOOD; i++) {
		json_t *challenge;
		int fd = control_conn(&challenge);
		assert_int_equal(wsr_send(fd, "{nope", 5, 1), 0);
		json_decref(next_json(fd, 4096));
		json_decref(challenge);
		close(fd);
		fd = wsr_connect(S.port, 0);
		assert_true(fd >= 0);
		assert_true(wsr_upgrade(fd, "/status", "rowshift-status", "evil.example", "http://evil.example", NULL) != 101);
		close(fd);
	}
	double took = rs_now() - t0;
	restore_log(saved);
	int lines = count_lines(path, NULL, 0);
	print_message("%d refusals in %.1f s: %d log lines\n", 2 * FLOOD, took, lines);
	/* ten at once, then one a second (a line for what was not logged included) */
	assert_true(lines >= 1);
	assert_true(lines <= 10 + (int)took + 2);
	unlink(path);
}

/* A peer's key carrying a newline and a forged log line stays on the refusal's own line. */
static void test_no_forged_log_line(void **state)
{
	(void)state;
	char path[] = "/tmp/rs_test_server_log_XXXXXX";
	int tmp = mkstemp(path);
	assert_true(tmp >= 0);
	close(tmp);
	int saved = capture_log(path);
	json_t *challenge;
	int fd = control_conn(&challenge);
	char *join = join_text(challenge, TOKEN, "\n12:00:00.000 FORGED\x1b[2J");
	assert_int_equal(wsr_send(fd, join, strlen(join), 1), 0);
	json_t *r = next_json(fd, 4096);
	assert_non_null(r);
	assert_string_equal(rs_proto_type(r), "refused"); /* an unknown key: the join's schema is strict */
	const char *reason = json_string_value(json_object_get(r, "reason"));
	assert_non_null(reason);
	assert_null(strpbrk(reason, "\n\x1b"));
	assert_true(wsr_closed(fd));
	restore_log(saved);
	assert_int_equal(count_lines(path, "FORGED", 0), 1);   /* logged, on the refusal's line */
	assert_int_equal(count_lines(path, "12:00:00.000", 1), 0);
	assert_int_equal(count_lines(path, "\x1b", 0), 0);
	json_decref(r);
	free(join);
	json_decref(challenge);
	close(fd);
	unlink(path);
}

/* One upgrade with these Host and Origin headers: whether it was accepted. */
static int upgrades(const char *path, const char *protocol, const char *host, const char *origin)
{
	int fd = wsr_connect(S.port, 0);
	assert_true(fd >= 0);
	int code = wsr_upgrade(fd, path, protocol, host, origin, NULL);
	close(fd);
	return code == 101;
}

/* Browsers: only pages under a name of ours (or an address) upgrade or get the page; a rebound name does not. */
static void test_browser_hosts(void **state)
{
	(void)state;
	char h[128], o[160];
	struct {
		const char *host, *origin_host;
		int ok;                                     /* upgrades */
		int page;                                   /* the host gets the page */
	} cases[] = {
		{"rebind.example", "rebind.example", 0, 0}, /* DNS rebinding: Host and Origin agree, the name is not ours */
		{"localhost", "localhost", 1, 1},           /* kubectl port-forward */
		{"LocalHost.", "LocalHost.", 1, 1},
		{"127.0.0.1", "127.0.0.1", 1, 1},
		{"[::1]", "[::1]", 1, 1},
		{"10.1.2.3", "10.1.2.3", 1, 1},             /* an address is never a rebound name */
		{"coord.example", "coord.example", 1, 1},   /* allowed at creation */
		{"other.example", "other.example", 1, 1},
		{"coord.example.evil", "coord.example.evil", 0, 0},
		{"localhost", "rebind.example", 0, 1},      /* another site's page */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(h, sizeof(h), "%s:%d", cases[i].host, S.port);
		snprintf(o, sizeof(o), "http://%s:%d", cases[i].origin_host, S.port);
		print_message("Host %s, Origin %s\n", h, o);
		assert_int_equal(upgrades("/status", "rowshift-status", h, o), cases[i].ok);
		assert_int_equal(upgrades("/", "rowshift-control", h, o), cases[i].ok);
		assert_int_equal(wsr_http_get(S.port, "/", h), cases[i].page ? 404 : 403); /* no page here: 404 */
		assert_int_equal(wsr_http_get(S.port, "/healthz", h), 200);              /* probes: anyone */
	}
	/* no Origin: not a browser (a worker reaching a Service by its name) */
	snprintf(h, sizeof(h), "rebind.example:%d", S.port);
	assert_true(upgrades("/status", "rowshift-status", h, NULL));
}

/* fd upgraded to a status client. */
static void status_upgrade(int fd)
{
	assert_int_equal(wsr_upgrade(fd, "/status", "rowshift-status", "127.0.0.1", NULL, NULL), 101);
}

/* Non-reading status clients share one snapshot and hold a fragment each at most, never a copy. */
static void test_status_clients_share(void **state)
{
	(void)state;
	enum { CLIENTS = 100 };
	int fd[CLIENTS];
	S.snapshot_pad = 1 << 20; /* what the kernel's socket buffers do not take, lws would buffer per client */
	long before = wsr_rss_kib(), peak = before;
	double t0 = rs_now();
	for (int i = 0; i < CLIENTS; i++) {
		fd[i] = wsr_connect(S.port, 4096);
		assert_true(fd[i] >= 0);
		status_upgrade(fd[i]);
	}
	assert_true(wait_for(&S.clients, CLIENTS));
	for (double until = rs_now() + 2; rs_now() < until; rs_sleep(0.05)) {
		long now = wsr_rss_kib();
		peak = now > peak ? now : peak;
	}
	unsigned long built = atomic_load(&S.built);
	double took = rs_now() - t0;
	print_message("%d clients not reading a %zu KiB snapshot: %lu snapshots built in %.1f s, RSS %ld -> %ld KiB\n",
		      CLIENTS, S.snapshot_pad >> 10, built, took, before, peak);
	assert_true(built >= 1 && built <= 1 + (unsigned long)took); /* one a second at most */
	/* the rest of a copy each (what the kernel did not take) is 80 MiB; a fragment each, 2 MiB */
#ifdef __SANITIZE_ADDRESS__
	/* ASan's quarantine and shadow count in RSS (it measured 110 MiB here): the plain build (make test) checks this */
	print_message("under ASan the RSS bound is not checked; make test checks it\n");
#else
	assert_true(peak - before < 16 << 10);
#endif
	/* and one that reads gets the whole snapshot, in fragments, intact */
	size_t n;
	char *text = wsr_recv(fd[0], &n, 2 << 20);
	assert_non_null(text);
	json_t *j = json_loads(text, 0, NULL);
	assert_non_null(j);
	assert_int_equal(strlen(json_string_value(json_object_get(j, "pad"))), S.snapshot_pad);
	json_decref(j);
	free(text);
	/* so does the C client rowshiftctl uses */
	rs_control *c = NULL;
	rs_err err = {0};
	json_t *m = NULL;
	assert_int_equal(rs_control_open_status(S.url, NULL, 5000, &c, &err), RS_OK);
	double t = rs_now();
	assert_int_equal(rs_control_recv(c, WSR_TIMEOUT_S * 1000, &m), RS_OK);
	print_message("rs_control_recv took the %zu KiB snapshot in %.2f s\n", S.snapshot_pad >> 10, rs_now() - t);
	assert_int_equal(strlen(json_string_value(json_object_get(m, "pad"))), S.snapshot_pad);
	json_decref(m);
	rs_control_close(c);
	for (int i = 0; i < CLIENTS; i++)
		close(fd[i]);
}

/* At most RS_STATUS_MAX_CLIENTS status clients. */
static void test_status_client_cap(void **state)
{
	(void)state;
	enum { CLIENTS = RS_STATUS_MAX_CLIENTS + 8 };
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 2 * CLIENTS + 64) {
		print_message("skipped: %d descriptors needed\n", 2 * CLIENTS + 64);
		skip();
	}
	int fd[CLIENTS], ok = 0;
	for (int i = 0; i < CLIENTS; i++) {
		fd[i] = wsr_connect(S.port, 4096);
		assert_true(fd[i] >= 0);
		ok += wsr_upgrade(fd[i], "/status", "rowshift-status", "127.0.0.1", NULL, NULL) == 101;
	}
	assert_int_equal(ok, RS_STATUS_MAX_CLIENTS);
	for (int i = 0; i < CLIENTS; i++)
		close(fd[i]);
}

/* Read the next message on fd and check it: an event n, or a snapshot (whose count of events is returned). */
static int expect(int fd, const char *type, int n)
{
	json_t *j = next_json(fd, 1 << 20);
	assert_non_null(j);
	assert_string_equal(rs_proto_type(j), type);
	int got = (int)json_integer_value(json_object_get(j, !strcmp(type, "event") ? "n" : "published"));
	if (n >= 0)
		assert_int_equal(got, n);
	json_decref(j);
	return got;
}

/* Two connections: *a a status client that has its first snapshot (no event yet), *b not yet upgraded. */
static void two_clients(int *a, int *b)
{
	*a = wsr_connect(S.port, 0);
	*b = wsr_connect(S.port, 0);
	assert_true(*a >= 0 && *b >= 0);
	status_upgrade(*a);
	expect(*a, "snapshot", 0);
}

/* Whichever snapshot a client gets (built for it, or shared), the events after it follow, none missing or twice. */
static void test_status_snapshot_then_events(void **state)
{
	(void)state;
	int a, b;
	two_clients(&a, &b);
	atomic_store(&S.to_publish, 3);
	assert_true(wait_for(&S.published, 3));
	for (int k = 1; k <= 3; k++)
		expect(a, "event", k);
	status_upgrade(b);
	int from = expect(b, "snapshot", -1); /* 0 when a's was shared (then 1..3 follow), 3 when built anew */
	assert_true(from == 0 || from == 3);
	for (int k = from + 1; k <= 3; k++)
		expect(b, "event", k);
	atomic_store(&S.to_publish, 2);
	for (int k = 4; k <= 5; k++) {
		expect(a, "event", k);
		expect(b, "event", k);
	}
	close(a);
	close(b);
}

/*
 * Wait up to `s` seconds for a message on fd. A held stream's messages may
 * come RS_STATUS_HOLD_MAX_S after the hold began (at held_since or later:
 * the cap), never before; a failed assertion otherwise.
 */
static void nothing_early(int fd, double s, double held_since)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int r = poll(&p, 1, (int)(s * 1000));
	assert_true(r >= 0);
	if (r > 0)
		assert_true(rs_now() - held_since >= RS_STATUS_HOLD_MAX_S);
}

/*
 * A held stream (a reshard's pause) writes nothing, a new client's snapshot
 * neither; released, everything goes out in order; held past
 * RS_STATUS_HOLD_MAX_S, what waits goes out though the hold goes on.
 */
static void test_status_held_while_stopped(void **state)
{
	(void)state;
	int a, b;
	two_clients(&a, &b);
	double t = rs_now();
	atomic_store(&S.hold, 1);
	atomic_store(&S.to_publish, 3);
	assert_true(wait_for(&S.published, 3));
	nothing_early(a, 0.2, t);
	/* a client that comes meanwhile is let in, and waits too */
	status_upgrade(b);
	nothing_early(b, 0.1, t);
	atomic_store(&S.hold, 0);
	for (int k = 1; k <= 3; k++)
		expect(a, "event", k);
	int from = expect(b, "snapshot", -1); /* 0 when a's was shared (then 1..3 follow), 3 when built anew */
	assert_true(from == 0 || from == 3);
	for (int k = from + 1; k <= 3; k++)
		expect(b, "event", k);
	/* held long: out at RS_STATUS_HOLD_MAX_S after the hold began, while still held */
	t = rs_now();
	atomic_store(&S.hold, 1);
	atomic_store(&S.to_publish, 2);
	expect(a, "event", 4);
	double took = rs_now() - t;
	print_message("events held from the hold's start went out %.2f s after it\n", took);
	assert_true(took >= RS_STATUS_HOLD_MAX_S);
	expect(a, "event", 5);
	for (int k = 4; k <= 5; k++)
		expect(b, "event", k);
	atomic_store(&S.hold, 0);
	close(a);
	close(b);
}

/* The worker's client takes a large message right after a proven welcome (a plan), past its 4 KiB handshake limit. */
static void test_large_message_after_welcome(void **state)
{
	(void)state;
	S.after_welcome = 300 << 10;
	rs_control *c = NULL;
	rs_err err = {0};
	json_t *m = NULL;
	assert_int_equal(rs_control_connect(S.url, TOKEN, "tester", "", NULL, 5000, &c, &err), RS_OK);
	assert_int_equal(rs_control_recv(c, WSR_TIMEOUT_S * 1000, &m), RS_OK);
	assert_string_equal(rs_proto_type(m), "big");
	assert_int_equal(strlen(json_string_value(json_object_get(m, "pad"))), S.after_welcome);
	json_decref(m);
	rs_control_close(c);
}

/* A worker whose coordinator went away is told why (the worker's log says it beside "lost the coordinator"). */
static void test_why_the_connection_closed(void **state)
{
	rs_control *c = NULL;
	rs_err err = {0};
	json_t *m = NULL;
	assert_int_equal(rs_control_connect(S.url, TOKEN, "tester", "", NULL, 5000, &c, &err), RS_OK);
	assert_int_equal(rs_control_recv(c, 50, &m), RS_ETIMEDOUT);
	assert_string_equal(rs_control_why(c), ""); /* open: nothing to say */
	teardown(state);
	rs_status st = RS_ETIMEDOUT;
	for (double until = rs_now() + WSR_TIMEOUT_S; st == RS_ETIMEDOUT && rs_now() < until;)
		st = rs_control_recv(c, 100, &m);
	assert_int_equal(st, RS_EPEER);
	print_message("the coordinator gone: %s\n", rs_control_why(c));
	assert_non_null(strstr(rs_control_why(c), "coordinator"));
	rs_control_close(c);
	setup(state); /* for the teardown */
}

/* Whether c is still open after `seconds` of waiting for a message that never comes. */
static int open_after(rs_control *c, double seconds)
{
	json_t *m = NULL;
	rs_status st = RS_ETIMEDOUT;
	for (double until = rs_now() + seconds; st == RS_ETIMEDOUT && rs_now() < until;)
		st = rs_control_recv(c, 100, &m);
	json_decref(m);
	return st == RS_ETIMEDOUT;
}

/*
 * The idle policy (wsmsg.h), shortened to a PING after 1 s without proof
 * that the peer answers and a hang-up after 6 s: a coordinator that
 * services nothing for 2.5 s (busy elsewhere) keeps its worker, whose PING
 * it answers late (lws's default gave 10 s of 310); one that stays silent
 * is found gone within the hang-up time, and the worker says it hung up.
 */
static void test_idle_policy(void **state)
{
	rs_control *c = NULL;
	rs_err err = {0};
	teardown(state);
	rs_ws_set_idle_policy(1, 6);
	assert_int_equal(setup(state), 0);
	assert_int_equal(rs_control_connect(S.url, TOKEN, "tester", "", NULL, 5000, &c, &err), RS_OK);
	atomic_store(&S.frozen, 1);
	assert_true(open_after(c, 2.5));
	atomic_store(&S.frozen, 0);
	assert_true(open_after(c, 7)); /* past the hang-up time of the PING sent while it was frozen */
	atomic_store(&S.frozen, 1);
	double t0 = rs_now();
	assert_false(open_after(c, 20));
	print_message("a coordinator silent for good: the worker hung up after %.1f s (%s)\n", rs_now() - t0,
		      rs_control_why(c));
	assert_non_null(strstr(rs_control_why(c), "no answer from the coordinator"));
	atomic_store(&S.frozen, 0);
	rs_control_close(c);
}

/*
 * A worker busy past the hang-up time (building or loading a large model,
 * saving it) keeps its connection while its link's keeper answers the
 * coordinator's PINGs (and sends its own): the policy shortened to 1 and
 * 3 s, the worker's thread away for 5 s. Without the keeper the
 * coordinator hangs up 3 s after the worker's last answer, and the worker
 * finds its connection closed when it comes back. The keeper takes turns
 * with a post from the busy thread (a reshard's progress).
 */
static void test_busy_worker_kept(void **state)
{
	teardown(state);
	rs_ws_set_idle_policy(1, 3);
	assert_int_equal(setup(state), 0);
	for (int keep = 1; keep >= 0; keep--) {
		rs_coord_conn *conn = NULL;
		rs_link l;
		rs_link_keeper k;
		rs_err err = {0};
		assert_int_equal(rs_coord_conn_control(S.url, TOKEN, "tester", NULL, &conn), RS_OK);
		rs_link_init(&l, conn, "", 5000, 1000, NULL);
		assert_int_equal(rs_link_join(&l, &err), RS_OK);
		if (keep)
			rs_link_keep_start(&k, &l);
		for (int i = 0; i < 10; i++) { /* busy, posting progress now and then when kept */
			rs_sleep(0.5);
			if (keep)
				rs_link_post(&l, json_pack("{s:s, s:i}", "type", "progress", "i", i));
		}
		if (keep)
			rs_link_keep_stop(&k);
		rs_status st = RS_OK;
		for (double until = rs_now() + 0.5; st == RS_OK && l.up && rs_now() < until; rs_sleep(0.05))
			st = conn->ops->poll(conn);
		print_message("busy 5 s %s its keeper: the connection is %s%s%s\n", keep ? "with" : "without",
			      st == RS_OK && l.up ? "open" : "closed", st == RS_OK ? "" : ": ", st == RS_OK ? "" : conn->ops->why(conn));
		assert_int_equal(st == RS_OK && l.up, keep);
		if (keep)
			assert_true(wait_for(&S.messages, 10)); /* the posts went out between the keeper's turns */
		rs_link_close(&l);
		rs_coord_conn_destroy(conn);
	}
}

/*
 * A worker does not rejoin a deposed coordinator: once it joined one of
 * term 5, one of term 3 (still running on its old address) is refused,
 * and one of term 7 (the next successor) is joined. Last: the term a
 * process joined stays with it.
 */
static void test_deposed_coordinator_refused(void **state)
{
	(void)state;
	static const int64_t terms[] = {5, 3, 5, 7};
	static const rs_status want[] = {RS_OK, RS_EPEER, RS_OK, RS_OK};
	for (int i = 0; i < 4; i++) {
		memset(&S, 0, sizeof(S));
		assert_int_equal(start_term(NULL, terms[i]), 0);
		rs_control *c = NULL;
		rs_err err = {0};
		rs_status st = rs_control_connect(S.url, TOKEN, "tester", "", NULL, 5000, &c, &err);
		if (st != want[i])
			fail_msg("term %lld: %s (%s)", (long long)terms[i], rs_status_str(st), err.msg);
		if (st != RS_OK && !strstr(err.msg, "deposed coordinator (term 3; this worker joined one of term 5)"))
			fail_msg("'%s' does not say why", err.msg);
		rs_control_close(c);
		teardown(NULL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_join_past_idle_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusal_is_unsigned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_first_message_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusal_log_is_rate_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_forged_log_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_browser_hosts, setup_hosts, teardown),
		cmocka_unit_test_setup_teardown(test_status_clients_share, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_client_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_snapshot_then_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_held_while_stopped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_message_after_welcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_with_another_model, setup, teardown),
		cmocka_unit_test_setup_teardown(test_why_the_connection_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_policy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy_worker_kept, setup, teardown),
		cmocka_unit_test(test_deposed_coordinator_refused), /* last: see there */
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
