/*
 * test_control.c - tests common/control.c, the workers' (and rowshiftctl's)
 * client of the coordinator, against an impostor on the coordinator's
 * address (tests/unit/ws_raw.h): until the coordinator proves itself, a
 * peer may send one message of at most 4 KiB at a time, so whatever it
 * sends costs the client a few KiB and ends the attempt as RS_EPEER (try
 * again later), never as a refusal; only a refusal, before any coordinator
 * proved itself to the process, is taken at its word. The real
 * coordinator's side, a large message right after a proven welcome, is in
 * test_server.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/control.h"
#include "tests/unit/ws_raw.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the impostor does once the client's upgrade is answered. */
typedef enum { BIG, FLOOD, REFUSE } act;

static struct {
	int lfd, port;
	act what;
	char *body;    /* what it sends (made before the client's memory is measured) */
	size_t bytes;
	int sent;      /* messages the impostor got out before the client hung up (or all) */
	int joined;    /* REFUSE: the client's join came before the refusal went */
} I;

/* What costs a JSON parser most per byte: a long array of empty objects, n bytes at most. */
static void make_body(size_t n)
{
	I.body = malloc(n);
	assert_non_null(I.body);
	I.body[0] = '[';
	for (size_t i = 1; i + 3 < n; i += 3)
		memcpy(I.body + i, "{},", 3);
	I.bytes = 1 + (n - 2) / 3 * 3;
	I.body[I.bytes - 1] = ']';
}

static void *impostor(void *arg)
{
	(void)arg;
	int fd = wsr_accept_upgrade(I.lfd, "rowshift-control");
	if (fd < 0)
		return NULL;
	static const char challenge[] = "{\"type\":\"challenge\",\"nonce\":\"0123456789abcdef0123456789abcdef\","
					"\"epoch\":\"0123456789abcdef0123456789abcdef\"}";
	int count = I.what == BIG ? 1 : 20000;
	if (I.what != BIG && wsr_send(fd, challenge, sizeof(challenge) - 1, 0) != 0)
		count = 0;
	if (I.what == REFUSE && count) { /* the join answered with a refusal that carries no proof */
		size_t n;
		char *join = wsr_recv(fd, &n, 4096);
		I.joined = join && strstr(join, "\"type\":\"join\"");
		free(join);
		count = 1;
	}
	for (I.sent = 0; I.sent < count && wsr_send(fd, I.body, I.bytes, 0) == 0; I.sent++)
		;
	wsr_closed(fd);
	close(fd);
	return NULL;
}

/* Join the impostor doing what; the client's RSS growth (KiB) in *grew. */
static rs_status join_impostor(act what, long *grew, rs_err *err)
{
	pthread_t t;
	rs_control *c = NULL;
	char url[64];
	I.lfd = wsr_listen(&I.port);
	assert_true(I.lfd >= 0);
	I.what = what;
	I.joined = 0;
	if (what == REFUSE) {
		static const char refused[] = "{\"type\":\"refused\",\"reason\":\"this job trains another model\"}";
		I.body = strdup(refused);
		assert_non_null(I.body);
		I.bytes = sizeof(refused) - 1;
	} else {
		make_body(what == BIG ? (size_t)8 << 20 : 4000);
	}
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d", I.port);
	assert_int_equal(pthread_create(&t, NULL, impostor, NULL), 0);
	long before = wsr_rss_kib();
	rs_status st = rs_control_connect(url, "the-token", "w", "127.0.0.1:1", NULL, 5000, &c, err);
	*grew = wsr_rss_kib() - before;
	rs_control_close(c);
	pthread_join(t, NULL);
	close(I.lfd);
	free(I.body);
	print_message("impostor %s: %s; it got %d message(s) of %zu bytes out; RSS grew %ld KiB\n",
		      what == BIG ? "big" : what == FLOOD ? "flood" : "refuse", err->msg, I.sent, I.bytes, *grew);
	return st;
}

/* ws:// and wss:// URLs, HOST:PORT with an optional slash; anything else is refused before any connection. */
static void test_urls(void **state)
{
	(void)state;
	static const char *const bad[] = {"http://127.0.0.1:1", "127.0.0.1:1", "ws://127.0.0.1", "ws://127.0.0.1:0",
					  "wss://127.0.0.1:70000", "ws://127.0.0.1:1/path", "ws://[::1:1", "ws://:1",
					  "wss://[::1]:1" /* the certificate's name could not be checked */};
	static const char *const good[] = {"ws://127.0.0.1:1", "wss://127.0.0.1:1", "ws://127.0.0.1:1/", "ws://[::1]:1",
					   "wss://localhost:1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rs_control *c = NULL;
		rs_err err = {0};
		if (rs_control_connect(bad[i], "t", "w", "", NULL, 500, &c, &err) != RS_EINVAL ||
		    (!strstr(err.msg, "is not ws://") && !strstr(err.msg, "cannot have its certificate's name checked")))
			fail_msg("%s: %s", bad[i], err.msg);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		rs_control *c = NULL;
		rs_err err = {0};
		rs_status st = rs_control_connect(good[i], "t", "w", "", NULL, 500, &c, &err); /* nobody listens on port 1 */
		if (st == RS_OK || st == RS_EINVAL)
			fail_msg("%s: %s (%s)", good[i], rs_status_str(st), err.msg);
	}
}

/* --tls-ca: a missing file or one without a PEM certificate is named at once; NULL and "" mean the system's. */
static void test_tls_ca(void **state)
{
	(void)state;
	rs_err err = {0};
	assert_int_equal(rs_control_set_tls_ca("/nonexistent/ca.pem", &err), RS_ENOTFOUND);
	assert_non_null(strstr(err.msg, "/nonexistent/ca.pem"));
	err.msg[0] = 0;
	assert_int_equal(rs_control_set_tls_ca("examples/dlrm-small.json", &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "no PEM certificate"));
	assert_int_equal(rs_control_set_tls_ca(NULL, &err), RS_OK);
	assert_int_equal(rs_control_set_tls_ca("", &err), RS_OK);
}

/* A pod uid (POD_UID) is a Kubernetes uid or nothing: anything else is refused, naming it. */
static void test_pod_uid(void **state)
{
	(void)state;
	rs_err err = {0};
	assert_int_equal(rs_control_set_pod_uid(NULL, &err), RS_OK);
	assert_int_equal(rs_control_set_pod_uid("", &err), RS_OK);
	assert_int_equal(rs_control_set_pod_uid("a.b", &err), RS_EINVAL); /* the dot ends the uid in an incarnation */
	assert_non_null(strstr(err.msg, "pod uid 'a.b': not a Kubernetes uid"));
	assert_int_equal(rs_control_set_pod_uid("0123456789abcdef0123456789abcdef012345678", &err), RS_EINVAL); /* 41 */
	assert_int_equal(rs_control_set_pod_uid("6f1e2d3c-0b9a-4876-a5b4-c3d2e1f00912", &err), RS_OK);
}

/* One 8 MiB message before any proof: hung up on at 4 KiB, nothing parsed. */
static void test_big_message_hangs_up(void **state)
{
	(void)state;
	rs_err err = {0};
	long grew;
	assert_int_equal(join_impostor(BIG, &grew, &err), RS_EPEER);
	assert_non_null(strstr(err.msg, "over 4096 bytes"));
	assert_true(grew < 16 << 10); /* parsed, it takes hundreds of MiB */
}

/*
 * A challenge, then message after message, unasked: the client hangs up at
 * the second before it reads the challenge, or takes the second for the
 * answer to its join, which proves nothing; either way the attempt ends
 * and nothing piles up.
 */
static void test_flood_hangs_up(void **state)
{
	(void)state;
	rs_err err = {0};
	long grew;
	assert_int_equal(join_impostor(FLOOD, &grew, &err), RS_EPEER);
	assert_true(I.sent < 20000); /* the client was gone before the impostor was done */
	assert_true(grew < 16 << 10);
}

/*
 * A refusal without the coordinator's proof, before any coordinator proved
 * itself to this process (none does in this program): taken at its word,
 * RS_EINVAL, the worker gives up, as a set-up error trying again will not
 * mend (a join token or model that differ). After a proven join the same
 * refusal is an impostor's, RS_EPEER (test_server.c).
 */
static void test_refusal_before_any_proof(void **state)
{
	(void)state;
	rs_err err = {0};
	long grew;
	assert_int_equal(join_impostor(REFUSE, &grew, &err), RS_EINVAL);
	assert_true(I.joined);
	assert_non_null(strstr(err.msg, "refused the join: this job trains another model"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_urls),
		cmocka_unit_test(test_tls_ca),
		cmocka_unit_test(test_pod_uid),
		cmocka_unit_test(test_big_message_hangs_up),
		cmocka_unit_test(test_flood_hangs_up),
		cmocka_unit_test(test_refusal_before_any_proof),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
