/*
 * test_transport_tcp.c - tests worker/transport_tcp.c: the conformance
 * suite for 1 to 4 ranks, each a forked process on loopback; and the
 * faults: a peer killed mid-collective, a hung peer, a peer that never
 * shows up, a stranger with the wrong token or generation, an abort from
 * another thread, a desynchronized peer; idle and hostile connections to a
 * listener while the real mesh forms, more of them than it keeps in their
 * handshake (a flood), a peer whose listener drops every SYN, and a
 * listener that is not the peer (it must learn nothing that proves
 * knowledge of the token). Every failure must come back as a
 * status within a bounded time; the harness kills any rank still running
 * after a generous guard, which fails the test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/transport_conformance.h"
#include "tests/unit/world_harness.h"
#include "worker/transport_tcp.h"

#include "common/auth.h"
#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- conformance ------------------------------------------------------------------ */

static int conformance_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: create: %s\n", rank, msg);
		return 100;
	}
	return rs_transport_conformance(t) ? 1 : 0;
}

static void test_conformance(void **state)
{
	(void)state;
	for (int32_t n = 1; n <= 4; n++) {
		world w = {.n = n, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
			   .body = conformance_body};
		world_run(&w);
		for (int32_t r = 0; r < n; r++)
			if (w.exit_code[r] != 0)
				fail_msg("world %d: rank %d exited %d", n, r, w.exit_code[r]);
	}
}

/* ---- faults ------------------------------------------------------------------------ */

/* Rank 2 dies with SIGKILL (or stops, for a hang) after the first barrier; the others keep reducing. */
static int victim_signal;

static int dying_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: create: %s\n", rank, msg);
		return 100;
	}
	if (rs_transport_barrier(t) != RS_OK)
		return 101;
	if (rank == 2)
		raise(victim_signal);
	float v[1024] = {0};
	double t0 = world_now();
	for (int i = 0; i < 100000; i++) {
		rs_status s = rs_transport_allreduce_sum(t, v, 1024);
		if (s != RS_OK) {
			fprintf(stderr, "rank %d: after %.2f s: %s: %s\n", rank, world_now() - t0, rs_status_str(s),
				rs_transport_error(t));
			return s == (victim_signal == SIGKILL ? RS_EPEER : RS_ETIMEDOUT) ? 42 : 43;
		}
	}
	return 44; /* never noticed */
}

static void test_dead_peer_aborts_others(void **state)
{
	(void)state;
	victim_signal = SIGKILL;
	world w = {.n = 3, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = dying_body};
	world_run(&w);
	assert_int_equal(w.exit_code[2], -SIGKILL);
	assert_int_equal(w.exit_code[0], 42); /* RS_EPEER, well before the 20 s timeout would fire */
	assert_int_equal(w.exit_code[1], 42);
}

static void test_hung_peer_times_out(void **state)
{
	(void)state;
	victim_signal = SIGSTOP;
	world w = {.n = 3, .timeout_ms = 1000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = 2,
		   .body = dying_body};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 42);
	assert_int_equal(w.exit_code[1], 42);
}

static int expect_create_failure(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)t;
	fprintf(stderr, "rank %d: create: %s (%s)\n", rank, rs_status_str(st), msg);
	if (rank == 0)
		return st == RS_ETIMEDOUT ? (strstr(msg, "refused") ? 10 : 11) : 12;
	return st == RS_OK ? 20 : 21;
}

static void test_absent_peer(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 500, .absent = 1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		   .body = expect_create_failure};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 11); /* timed out, nobody refused */
}

static void test_strangers_refused(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = 1, .bad_generation = -1, .reap_last = -1,
		   .body = expect_create_failure};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 10); /* timed out, having refused the stranger */
	assert_int_equal(w.exit_code[1], 21);
	world g = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = -1, .bad_generation = 1, .reap_last = -1,
		   .body = expect_create_failure};
	world_run(&g);
	assert_int_equal(g.exit_code[0], 10);
	assert_int_equal(g.exit_code[1], 21);
}

static void *abort_later(void *arg)
{
	usleep(200000);
	rs_transport_abort(arg);
	return NULL;
}

static int abort_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	if (st != RS_OK)
		return 100;
	uint32_t v;
	double t0 = world_now();
	if (rank == 1) { /* never sends; waits for rank 0, which aborts but lives on: the end comes at once */
		rs_xfer r = {0, &v, sizeof(v), NULL};
		rs_status s = rs_transport_exchange(t, NULL, 0, &r, 1);
		double took = world_now() - t0;
		return s != RS_EPEER ? 40 : took < 1.0 ? 0 : 41;
	}
	pthread_t th;
	pthread_create(&th, NULL, abort_later, t);
	rs_xfer r = {1, &v, sizeof(v), NULL};
	rs_status s = rs_transport_exchange(t, NULL, 0, &r, 1);
	double took = world_now() - t0;
	pthread_join(th, NULL);
	if (s != RS_EABORTED)
		return 30;
	if (rs_transport_barrier(t) != RS_EABORTED)
		return 31; /* stays aborted */
	usleep(1500000); /* alive, its connections open, while rank 1 waits */
	return took < 1.0 ? 0 : 32;
}

static void test_abort_from_another_thread(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = abort_body};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 0);
	assert_int_equal(w.exit_code[1], 0); /* not 41: it waited for the aborted rank */
}

static int desync_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	if (st != RS_OK)
		return 100;
	uint64_t big = 7;
	uint32_t small;
	if (rank == 0) {
		rs_xfer s = {1, &big, sizeof(big), NULL};
		rs_status r = rs_transport_exchange(t, &s, 1, NULL, 0);
		return r == RS_OK || r == RS_EPEER ? 0 : 50;
	}
	rs_xfer r = {0, &small, sizeof(small), NULL}; /* expects 4 bytes, gets 8 */
	return rs_transport_exchange(t, NULL, 0, &r, 1) == RS_ECORRUPT ? 0 : 51;
}

static void test_desync_detected(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 5000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = desync_body};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 0);
	assert_int_equal(w.exit_code[1], 0);
}

/* ---- hostile connections --------------------------------------------------------------- */

static int connect_to(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

typedef struct member {
	rs_tcp_config cfg;
	rs_transport *t;
	rs_status st;
	rs_err err;
} member;

static void *create_member(void *arg)
{
	member *m = arg;
	m->st = rs_tcp_transport_create(&m->cfg, &m->t, &m->err);
	return NULL;
}

/* Everything readable on fd within ms, into buf (at most cap): the bytes a hostile side got. */
static size_t drain(int fd, char *buf, size_t cap, int ms)
{
	size_t n = 0;
	for (int64_t until = rs_now_ms() + ms; n < cap && rs_now_ms() < until;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t got = recv(fd, buf + n, cap - n, 0);
		if (got <= 0)
			break;
		n += (size_t)got;
	}
	return n;
}

/* The bytes of a hello from rank 1 of a world of 2 in generation 7 (what a stranger can forge without the token). */
static void forge_hello(char hb[8 + 8 + 8 + RS_AUTH_NONCE_HEX])
{
	uint32_t magic = 0x48545352u, version = 2;
	uint64_t gen = 7;
	int32_t r1 = 1, nworld = 2;
	memcpy(hb, &magic, 4), memcpy(hb + 4, &version, 4), memcpy(hb + 8, &gen, 8), memcpy(hb + 16, &r1, 4);
	memcpy(hb + 20, &nworld, 4), memset(hb + 24, 'a', RS_AUTH_NONCE_HEX);
}

static void test_idle_and_hostile_connections_do_not_delay_the_mesh(void **state)
{
	(void)state;
	int lfd, port;
	rs_err err = {0};
	char addr0[32], buf[4096];
	assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &lfd, &port, &err), RS_OK);
	snprintf(addr0, sizeof(addr0), "127.0.0.1:%d", port);
	/* before the real peer: one connection that never speaks, one that speaks garbage, one that says hello */
	int idle = connect_to(port), junk = connect_to(port), hello = connect_to(port);
	assert_int_equal(send(junk, "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL), 18);
	char hb[8 + 8 + 8 + RS_AUTH_NONCE_HEX];
	forge_hello(hb);
	assert_int_equal(send(hello, hb, sizeof(hb), MSG_NOSIGNAL), (ssize_t)sizeof(hb));
	const char *addrs[2] = {addr0, "127.0.0.1:1"};
	member m0 = {.cfg = {.rank = 0, .world = 2, .addrs = addrs, .listen_fd = lfd, .token = "s3cret-token",
			     .generation = 7, .timeout_ms = 30000}};
	member m1 = m0;
	m1.cfg.rank = 1, m1.cfg.listen_fd = -1;
	pthread_t a, b;
	pthread_create(&a, NULL, create_member, &m0);
	usleep(200000); /* the hostile connections are accepted first */
	pthread_create(&b, NULL, create_member, &m1);
	pthread_join(b, NULL);
	pthread_join(a, NULL);
	/* the mesh formed although three connections were still open and unproven */
	if (m0.st != RS_OK || m1.st != RS_OK)
		fail_msg("rank 0: %s; rank 1: %s", m0.err.msg, m1.err.msg);
	uint32_t v = 42, got = 0;
	rs_xfer sx = {0, &v, sizeof(v), NULL}, rx = {1, &got, sizeof(got), NULL};
	assert_int_equal(rs_transport_exchange(m1.t, &sx, 1, NULL, 0), RS_OK);
	assert_int_equal(rs_transport_exchange(m0.t, NULL, 0, &rx, 1), RS_OK);
	assert_int_equal(got, 42);
	/* what the hostile ones got: never the token */
	size_t n = drain(hello, buf, sizeof(buf), 200);
	assert_true(n > 0); /* a challenge, bound to its own nonce */
	assert_null(memmem(buf, n, "s3cret-token", 12));
	rs_transport_destroy(m0.t);
	rs_transport_destroy(m1.t);
	close(idle), close(junk), close(hello);
}

typedef struct impostor {
	int lfd;
	char got[4096];
	size_t n;
} impostor;

/* Accept one connection, answer its hello with a challenge whose proof is made up, keep what comes. */
static void *run_impostor(void *arg)
{
	impostor *im = arg;
	int fd = accept(im->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	im->n = drain(fd, im->got, 8 + 8 + 8 + RS_AUTH_NONCE_HEX, 2000);
	char ch[8 + RS_AUTH_NONCE_HEX + RS_AUTH_PROOF_HEX];
	uint32_t magic = 0x43545352u;
	int32_t rank = 0;
	memcpy(ch, &magic, 4), memcpy(ch + 4, &rank, 4), memset(ch + 8, 'b', sizeof(ch) - 8);
	if (send(fd, ch, sizeof(ch), MSG_NOSIGNAL) == (ssize_t)sizeof(ch))
		im->n += drain(fd, im->got + im->n, sizeof(im->got) - im->n, 1000);
	close(fd);
	return NULL;
}

static void test_impostor_listener_learns_nothing(void **state)
{
	(void)state;
	impostor im = {0};
	int port;
	rs_err err = {0};
	char addr0[32];
	assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &im.lfd, &port, &err), RS_OK);
	snprintf(addr0, sizeof(addr0), "127.0.0.1:%d", port);
	pthread_t th;
	pthread_create(&th, NULL, run_impostor, &im);
	const char *addrs[2] = {addr0, "127.0.0.1:1"};
	member m1 = {.cfg = {.rank = 1, .world = 2, .addrs = addrs, .listen_fd = -1, .token = "s3cret-token",
			     .generation = 7, .timeout_ms = 3000}};
	create_member(&m1);
	pthread_join(th, NULL);
	close(im.lfd);
	assert_int_equal(m1.st, RS_EPEER);
	assert_non_null(strstr(m1.err.msg, "did not prove it holds the join token"));
	/* the impostor got the hello and nothing else: no token, no proof of it */
	assert_int_equal(im.n, 8 + 8 + 8 + RS_AUTH_NONCE_HEX);
	assert_null(memmem(im.got, im.n, "s3cret-token", 12));
}

/* ---- floods and black holes ----------------------------------------------------------- */

#define HANDSHAKE_TABLE 256 /* the listener's MAX_PENDING */
#define FLOOD 600           /* connections kept open to it: more than its table and its old backlog (256) together */

typedef struct flooder {
	int port;
	atomic_int stop;
	atomic_int established; /* connections that completed, in all */
	atomic_int dropped;     /* of those, closed by the listener */
} flooder;

/*
 * Keep FLOOD connections open to fl->port until told to stop, opening a new
 * one for each the listener closes: every other one says a forged hello
 * (and never answers the challenge), the others never say a word.
 */
static void *run_flood(void *arg)
{
	flooder *fl = arg;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fl->port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct pollfd p[FLOOD];
	int up[FLOOD] = {0};
	char hb[8 + 8 + 8 + RS_AUTH_NONCE_HEX], junk[4096];
	forge_hello(hb);
	for (int i = 0; i < FLOOD; i++)
		p[i].fd = -1;
	while (!atomic_load(&fl->stop)) {
		for (int i = 0; i < FLOOD; i++) {
			if (p[i].fd < 0 && (p[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) >= 0) {
				up[i] = 0;
				if (connect(p[i].fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
					close(p[i].fd);
					p[i].fd = -1;
				}
			}
			p[i].events = up[i] ? POLLIN : POLLOUT;
		}
		if (poll(p, FLOOD, 10) <= 0)
			continue;
		for (int i = 0; i < FLOOD; i++) {
			int e = 0;
			socklen_t el = sizeof(e);
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			if (!up[i] && getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0) {
				up[i] = 1;
				atomic_fetch_add(&fl->established, 1);
				if (i % 2 == 0 || send(p[i].fd, hb, sizeof(hb), MSG_NOSIGNAL) == (ssize_t)sizeof(hb))
					continue;
			} else if (up[i]) {
				ssize_t n = recv(p[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
				if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
					continue; /* a challenge, never answered */
				atomic_fetch_add(&fl->dropped, 1);
			}
			close(p[i].fd);
			p[i].fd = -1;
		}
	}
	for (int i = 0; i < FLOOD; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	return NULL;
}

static void test_a_flood_does_not_keep_the_peer_out(void **state)
{
	(void)state;
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 4 * FLOOD && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < 4 * FLOOD ? rl.rlim_max : 4 * FLOOD;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	int lfd, port;
	rs_err err = {0};
	char addr0[32];
	assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &lfd, &port, &err), RS_OK);
	snprintf(addr0, sizeof(addr0), "127.0.0.1:%d", port);
	const char *addrs[2] = {addr0, "127.0.0.1:1"};
	/* the mesh's deadline is no later than a handshake's (5 s): no flood connection times out to make room before it */
	member m0 = {.cfg = {.rank = 0, .world = 2, .addrs = addrs, .listen_fd = lfd, .token = "s3cret-token",
			     .generation = 7, .timeout_ms = 5000}};
	member m1 = m0;
	m1.cfg.rank = 1, m1.cfg.listen_fd = -1;
	flooder fl = {.port = port};
	pthread_t a, b, f;
	assert_int_equal(pthread_create(&a, NULL, create_member, &m0), 0);
	assert_int_equal(pthread_create(&f, NULL, run_flood, &fl), 0);
	/* the real peer comes once the flood has more connections than the listener keeps in their handshake */
	for (int i = 0; i < 100 && atomic_load(&fl.established) <= HANDSHAKE_TABLE; i++)
		usleep(20000);
	usleep(200000);
	assert_int_equal(pthread_create(&b, NULL, create_member, &m1), 0);
	pthread_join(b, NULL);
	pthread_join(a, NULL);
	atomic_store(&fl.stop, 1);
	pthread_join(f, NULL);
	fprintf(stderr, "flood: %d connections established, %d of them closed by the listener\n",
		atomic_load(&fl.established), atomic_load(&fl.dropped));
	if (m0.st != RS_OK || m1.st != RS_OK)
		fail_msg("rank 0: %s; rank 1: %s", m0.err.msg, m1.err.msg);
	assert_true(atomic_load(&fl.established) > HANDSHAKE_TABLE);
	assert_true(atomic_load(&fl.dropped) > 0); /* the listener kept accepting, and dropped flood connections */
	uint32_t v = 42, got = 0;
	rs_xfer sx = {0, &v, sizeof(v), NULL}, rx = {1, &got, sizeof(got), NULL};
	assert_int_equal(rs_transport_exchange(m1.t, &sx, 1, NULL, 0), RS_OK);
	assert_int_equal(rs_transport_exchange(m0.t, NULL, 0, &rx, 1), RS_OK);
	assert_int_equal(got, 42);
	rs_transport_destroy(m0.t);
	rs_transport_destroy(m1.t);
}

/*
 * A peer whose listener drops every SYN (a queue of 0 with one connection
 * waiting, as a black hole or a full backlog does): the connection attempt
 * ends at the mesh's deadline (1 s), where a blocking connect() would wait
 * for the kernel to give up (about 2 minutes). A rank still connecting after
 * 30 s is killed, which fails the test.
 */
static void test_connect_ends_at_the_deadline(void **state)
{
	(void)state;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), status = 0;
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	int filler = connect_to(ntohs(sa.sin_port)); /* never accepted: the queue is full */
	char addr0[32];
	snprintf(addr0, sizeof(addr0), "127.0.0.1:%d", ntohs(sa.sin_port));
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *addrs[2] = {addr0, "127.0.0.1:1"};
		member m1 = {.cfg = {.rank = 1, .world = 2, .addrs = addrs, .listen_fd = -1, .token = "s3cret-token",
				     .generation = 7, .timeout_ms = 1000}};
		create_member(&m1);
		fprintf(stderr, "rank 1: create: %s (%s)\n", rs_status_str(m1.st), m1.err.msg);
		_exit(m1.st == RS_ETIMEDOUT ? 0 : 1);
	}
	pid_t w;
	double t0 = world_now();
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && world_now() - t0 < 30)
		usleep(20000);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	close(filler);
	close(lfd);
	if (w == 0)
		fail_msg("rank 1 was still connecting after 30 s: the connection attempt ignored the 1 s deadline");
	assert_int_equal(w, pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0); /* RS_ETIMEDOUT */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conformance),
		cmocka_unit_test(test_dead_peer_aborts_others),
		cmocka_unit_test(test_hung_peer_times_out),
		cmocka_unit_test(test_absent_peer),
		cmocka_unit_test(test_strangers_refused),
		cmocka_unit_test(test_abort_from_another_thread),
		cmocka_unit_test(test_desync_detected),
		cmocka_unit_test(test_idle_and_hostile_connections_do_not_delay_the_mesh),
		cmocka_unit_test(test_impostor_listener_learns_nothing),
		cmocka_unit_test(test_a_flood_does_not_keep_the_peer_out),
		cmocka_unit_test(test_connect_ends_at_the_deadline),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
