/*
 * test_proto.c - tests common/proto.c: each message type's schema, and
 * malformed or unexpected messages rejected with a reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/proto.h"
#include "common/zjson.h"

#include <stdlib.h>
#include <string.h>

static json_t *parse_ok(const char *text, const char *want_type)
{
	json_t *m;
	const char *type;
	rs_err err = {0};
	if (rs_proto_parse(text, strlen(text), &m, &type, &err) != RS_OK)
		fail_msg("%s: %s", text, err.msg);
	assert_string_equal(type, want_type);
	return m;
}

static void test_parse(void **state)
{
	(void)state;
	static const char *const bad[] = {"", "{", "[]", "42", "{\"type\": 7}", "{\"kind\": \"join\"}",
					  "{\"type\": \"a\", \"type\": \"b\"}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *m = NULL;
		const char *type;
		rs_err err = {0};
		assert_int_equal(rs_proto_parse(bad[i], strlen(bad[i]), &m, &type, &err), RS_EINVAL);
		assert_null(m);
		assert_true(err.msg[0] != 0);
	}
}

#define NONCE "0123456789abcdef0123456789abcdef"
#define PROOF "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define MODEL "0000000a-0000000b-0000000c-0000000d-0000000e-0000000f"

static void test_join(void **state)
{
	(void)state;
	json_t *m = parse_ok("{\"type\":\"join\",\"worker\":\"w-0\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE
			     "\",\"proof\":\"" PROOF "\"}", "join");
	rs_msg_join j;
	rs_err err = {0};
	assert_int_equal(rs_proto_join(m, &j, &err), RS_OK);
	assert_string_equal(j.worker, "w-0");
	assert_int_equal(j.pid, 3);
	assert_int_equal(j.protocol, 0); /* absent: from before joins carried it */
	assert_string_equal(j.model, "");  /* absent: a tool's join */
	json_decref(m);
	m = parse_ok("{\"type\":\"join\",\"worker\":\"w-0\",\"addr\":\"h:1\",\"pid\":3,\"model\":\"" MODEL "\",\"nonce\":\"" NONCE
		     "\",\"proof\":\"" PROOF "\"}", "join");
	assert_int_equal(rs_proto_join(m, &j, &err), RS_OK);
	assert_string_equal(j.model, MODEL);
	json_decref(m);
#define J(rest) "{\"type\":\"join\"," rest "}"
	static const char *const bad[] = {
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""), /* no pid */
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\",\"x\":1"),
		J("\"token\":\"t\",\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3"), /* the token itself: never again */
		J("\"worker\":\"\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\\u001b[2J\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"short\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"abc\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":\"3\",\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""), /* pid a string */
		J("\"worker\":7,\"addr\":\"h:1\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""), /* name a number */
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"incarnation\":1,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1 x\",\"pid\":3,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""), /* addr */
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"protocol\":-1,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"protocol\":\"1\",\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"model\":\"abc\",\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		J("\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"model\":5,\"nonce\":\"" NONCE "\",\"proof\":\"" PROOF "\""),
		"{\"type\":\"progress\",\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3}", /* not a join */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *type;
		rs_err e = {0};
		assert_int_equal(rs_proto_parse(bad[i], strlen(bad[i]), &m, &type, &e), RS_OK);
		if (rs_proto_join(m, &j, &e) != RS_EINVAL)
			fail_msg("accepted: %s", bad[i]);
		assert_true(e.msg[0] != 0);
		json_decref(m);
	}
}

/* The handshake's proofs bind everything: a proof for one join or answer is no proof for another. */
static void test_join_handshake(void **state)
{
	(void)state;
	char p[65], q[65];
	rs_msg_join j = {.worker = "worker-1", .addr = "h:1", .pid = 7, .incarnation = "abc", .nonce = NONCE};
	assert_int_equal(rs_proto_join_proof("tok", NONCE, NONCE, &j, p), RS_OK);
	j.addr = "h:2";
	assert_int_equal(rs_proto_join_proof("tok", NONCE, NONCE, &j, q), RS_OK);
	assert_string_not_equal(p, q);
	j.protocol = RS_PROTOCOL_VERSION + 1; /* the version it announces is bound too */
	assert_int_equal(rs_proto_join_proof("tok", NONCE, NONCE, &j, p), RS_OK);
	assert_string_not_equal(p, q);
	j.model = MODEL; /* and its model config's digest */
	assert_int_equal(rs_proto_join_proof("tok", NONCE, NONCE, &j, q), RS_OK);
	assert_string_not_equal(p, q);
	/* without one (a tool's join, a worker of protocol 1), the proof is protocol 1's: an old worker is refused for
	   its version, not for its token */
	char v1[65];
	const char *parts[] = {NONCE, NONCE, NONCE, "worker-1", "h:2", "7", "abc", "1"};
	assert_int_equal(rs_auth_proof("tok", "rowshift join", parts, 8, v1), RS_OK);
	j.model = "", j.protocol = 1;
	assert_int_equal(rs_proto_join_proof("tok", NONCE, NONCE, &j, p), RS_OK);
	assert_string_equal(p, v1);
	assert_int_equal(rs_proto_answer_proof("tok", NONCE, NONCE, &j, "welcome", p), RS_OK);
	assert_int_equal(rs_proto_answer_proof("tok", NONCE, NONCE, &j, "bad join token", q), RS_OK);
	assert_string_not_equal(p, q);
	json_t *c = rs_proto_make_challenge(NONCE, NONCE, 0);
	const char *n, *e;
	int64_t term = -1;
	rs_err err = {0};
	assert_int_equal(rs_proto_challenge(c, &n, &e, &term, &err), RS_OK);
	assert_int_equal(term, 0); /* none said: 0 */
	assert_null(json_object_get(c, "term"));
	json_decref(c);
	c = rs_proto_make_challenge(NONCE, NONCE, 7);
	assert_int_equal(rs_proto_challenge(c, &n, &e, &term, &err), RS_OK);
	assert_int_equal(term, 7);
	json_decref(c);
	/* the term is bound into the proofs: a term changed on the way breaks them */
	char b7[96], b8[96];
	rs_proto_bound_epoch(NONCE, 7, b7, sizeof(b7));
	rs_proto_bound_epoch(NONCE, 8, b8, sizeof(b8));
	assert_int_equal(rs_proto_answer_proof("tok", NONCE, b7, &j, "welcome", p), RS_OK);
	assert_int_equal(rs_proto_answer_proof("tok", NONCE, b8, &j, "welcome", q), RS_OK);
	assert_string_not_equal(p, q);
	rs_proto_bound_epoch(NONCE, 0, b7, sizeof(b7));
	assert_string_equal(b7, NONCE); /* term 0: the epoch alone, as before terms */
	c = json_pack("{s:s, s:s, s:s, s:i}", "type", "challenge", "nonce", NONCE, "epoch", NONCE, "term", -1);
	assert_int_equal(rs_proto_challenge(c, &n, &e, &term, &err), RS_EINVAL);
	json_decref(c);
	c = rs_proto_make_challenge("nothex", NONCE, 0);
	assert_int_equal(rs_proto_challenge(c, &n, &e, &term, &err), RS_EINVAL);
	json_decref(c);
}

static void test_start_and_progress(void **state)
{
	(void)state;
	json_t *m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":1,\"world\":2,\"peers\":[\"a:1\",\"b:2\"],"
			     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	rs_msg_start s;
	rs_err err = {0};
	assert_int_equal(rs_proto_start(m, &s, &err), RS_OK);
	assert_int_equal(s.rank, 1);
	assert_null(s.save);
	json_decref(m);
	m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":2,\"world\":2,\"peers\":[\"a:1\",\"b:2\"],"
		     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	assert_int_equal(rs_proto_start(m, &s, &err), RS_EINVAL); /* rank outside the world */
	json_decref(m);
	m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":0,\"world\":2,\"peers\":[\"a:1\"],"
		     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	assert_int_equal(rs_proto_start(m, &s, &err), RS_EINVAL); /* one peer short */
	json_decref(m);
	/* the plans as the coordinator sends them: deflated once (zjson), objects again once parsed */
	json_t *plan = json_pack("{s:i, s:[]}", "world", 2, "tables"), *prev = json_pack("{s:i}", "world", 1);
	char *zp = rs_zjson_encode(plan), *zq = rs_zjson_encode(prev);
	json_t *peers = json_pack("[s, s]", "a:1", "b:2"), *uoo = json_pack("[i]", 0);
	rs_msg_start out = {.generation = 3, .rank = 1, .world = 2, .union_world = 2, .peers = peers,
			    .plan = json_string(zp), .previous_plan = json_string(zq), .union_of_old = uoo,
			    .first_step = 5, .steps = 9};
	m = rs_proto_make_start(&out);
	char *text = json_dumps(m, JSON_COMPACT);
	assert_non_null(strstr(text, zp)); /* on the wire: the deflated text */
	json_decref(m);
	m = parse_ok(text, "start");
	assert_int_equal(rs_proto_start(m, &s, &err), RS_OK);
	assert_true(json_equal(s.plan, plan) && json_equal(s.previous_plan, prev));
	json_decref(m);
	/* a damaged one is refused, naming the field */
	text[strlen(text) - strlen(strstr(text, zq)) + 2] ^= 0x01;
	m = parse_ok(text, "start");
	err = (rs_err){0};
	assert_int_equal(rs_proto_start(m, &s, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "start: previous_plan: not a whole zlib stream"));
	json_decref(m);
	free(text), free(zp), free(zq);
	json_decref(out.plan), json_decref(out.previous_plan), json_decref(peers), json_decref(uoo);
	json_decref(plan), json_decref(prev);
	m = parse_ok("{\"type\":\"progress\",\"rank\":0,\"step\":9,\"loss\":0.5,\"samples_per_s\":100}", "progress");
	rs_msg_progress p;
	assert_int_equal(rs_proto_progress(m, &p, &err), RS_OK);
	assert_true(p.auc < 0 && p.step == 9 && p.loss == 0.5);
	json_decref(m);
	m = parse_ok("{\"type\":\"progress\",\"rank\":0,\"step\":9,\"loss\":\"x\",\"samples_per_s\":100}", "progress");
	assert_int_equal(rs_proto_progress(m, &p, &err), RS_EINVAL);
	json_decref(m);
}

/* Each text must parse, then be accepted (ok) or refused with a reason by check. */
typedef rs_status (*checker)(json_t *m, rs_err *err);

static void expect(const char *text, checker check, rs_status want)
{
	json_t *m;
	const char *type;
	rs_err err = {0};
	if (rs_proto_parse(text, strlen(text), &m, &type, &err) != RS_OK)
		fail_msg("%s: %s", text, err.msg);
	rs_status got = check(m, &err);
	if (got != want)
		fail_msg("%s: got %s (%s), wanted %s", text, rs_status_str(got), err.msg, rs_status_str(want));
	if (got != RS_OK && !err.msg[0])
		fail_msg("%s: refused without a reason", text);
	json_decref(m);
}

static rs_status check_start(json_t *m, rs_err *err)
{
	rs_msg_start s;
	return rs_proto_start(m, &s, err);
}

static rs_status check_paused(json_t *m, rs_err *err)
{
	rs_msg_paused p;
	uint64_t sums[2];
	RSCHECK(rs_proto_paused(m, &p, err));
	if (p.held)
		RSCHECK(rs_proto_checksums(p.held, sums, 2, err));
	return p.checksum ? rs_proto_checksums(p.checksum, sums, 2, err) : RS_OK;
}

static rs_status check_staged(json_t *m, rs_err *err)
{
	rs_msg_staged s;
	RSCHECK(rs_proto_staged(m, &s, err));
	assert_true(s.ok || s.reason);
	return RS_OK;
}

static rs_status check_resume(json_t *m, rs_err *err)
{
	rs_msg_resume r;
	return rs_proto_resume(m, &r, err);
}

static rs_status check_generation(json_t *m, rs_err *err)
{
	int64_t gen, step;
	const char *why;
	return rs_proto_generation(m, &gen, &step, &why, err);
}

static rs_status check_idle(json_t *m, rs_err *err)
{
	const char *addr;
	return rs_proto_idle(m, &addr, err);
}

/* The messages of the resharding cycle (README, "Control protocol"). */
static void test_reshard_messages(void **state)
{
	(void)state;
#define RESHARD ",\"previous_plan\":{},\"union_of_old\":[0,2,1]"
#define START "{\"type\":\"start\",\"generation\":3,\"rank\":0,\"world\":2,\"union_world\":3," \
	      "\"peers\":[\"a:1\",\"b:2\",\"c:3\"],\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3," \
	      "\"eval_samples\":10"
	expect(START ",\"previous_plan\":{},\"union_of_old\":[0,2,1]}", check_start, RS_OK);
	expect(START ",\"previous_plan\":{}}", check_start, RS_EINVAL);            /* no union_of_old */
	expect(START ",\"union_of_old\":[0,1]}", check_start, RS_EINVAL);          /* no previous plan */
	expect(START ",\"previous_plan\":{},\"union_of_old\":[0,0]}", check_start, RS_EINVAL); /* a repeat */
	expect(START ",\"previous_plan\":{},\"union_of_old\":[0,3]}", check_start, RS_EINVAL); /* outside */
	expect(START ",\"previous_plan\":{},\"union_of_old\":[-1,0,-1]}", check_start, RS_OK); /* lost ones */
	expect(START ",\"previous_plan\":{},\"union_of_old\":[-2,0]}", check_start, RS_EINVAL);
	expect(START RESHARD ",\"restore\":\"ck/step-000000060\"}", check_start, RS_OK);
	expect(START ",\"restore\":\"ck/step-000000060\"}", check_start, RS_EINVAL); /* restore: a reshard's only */
	expect(START RESHARD ",\"restore\":7}", check_start, RS_EINVAL);
	expect(START RESHARD ",\"checkpoint_dir\":\"/c\",\"checkpoint_interval\":60}", check_start, RS_OK); /* by time only */
	expect(START RESHARD ",\"checkpoint_dir\":\"/c\",\"checkpoint_every\":5,\"checkpoint_interval\":60}", check_start, RS_OK);
	expect(START RESHARD ",\"checkpoint_dir\":\"/c\"}", check_start, RS_EINVAL);             /* when? */
	expect(START RESHARD ",\"checkpoint_interval\":60}", check_start, RS_EINVAL);             /* where? */
	expect(START RESHARD ",\"checkpoint_dir\":\"/c\",\"checkpoint_interval\":-1}", check_start, RS_EINVAL);
	expect(START "}", check_start, RS_EINVAL); /* a fresh start has no members beyond the world */
#undef START
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\","
	       "\"checksum\":[\"00000000000000ff\",\"ffffffffffffffff\"]}", check_paused, RS_OK);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\","
	       "\"checksum\":[\"00000000000000fg\",\"ffffffffffffffff\"]}", check_paused, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\","
	       "\"checksum\":[\"00000000000000ff\"]}", check_paused, RS_EINVAL); /* one table short */
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\","
	       "\"checksum\":[\"00000000000000ff\",\"ffffffffffffffff\"],\"held\":[\"01\"]}", check_paused, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"held\":{}}", check_paused,
	       RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":0,\"step\":50,\"addr\":\"h:1\"}", check_paused, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"prepared\":52}",
	       check_paused, RS_EINVAL); /* only the step after can be prepared */
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"stopped_s\":0.01}",
	       check_paused, RS_OK);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"stopped_s\":-1}",
	       check_paused, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"stopped_s\":1e9}",
	       check_paused, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h:1\",\"stopped_s\":\"x\"}",
	       check_paused, RS_EINVAL);
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":true,\"sent_bytes\":10,\"recv_bytes\":0,"
	       "\"wire_bytes\":14,\"kept_bytes\":7,\"connect_s\":0.1,\"copy_s\":0,\"move_s\":0.2}", check_staged, RS_OK);
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":false}", check_staged, RS_OK); /* a reason is filled in */
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":true,\"sent_bytes\":-1}", check_staged, RS_EINVAL);
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":1}", check_staged, RS_EINVAL);
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":true,\"restored_rows\":-3}", check_staged, RS_EINVAL);
	expect("{\"type\":\"staged\",\"generation\":4,\"ok\":true,\"restored\":{}}", check_staged, RS_EINVAL);
	expect("{\"type\":\"resume\",\"generation\":4,\"steps\":100,\"last\":true}", check_resume, RS_OK);
	expect("{\"type\":\"resume\",\"generation\":4,\"steps\":100}", check_resume, RS_EINVAL);
	expect("{\"type\":\"commit\",\"generation\":4}", check_generation, RS_OK);
	expect("{\"type\":\"commit\",\"generation\":0}", check_generation, RS_EINVAL);
	expect("{\"type\":\"abort\",\"generation\":4,\"reason\":\"x\"}", check_generation, RS_OK);
	expect("{\"type\":\"training\",\"generation\":4,\"step\":7}", check_generation, RS_OK);
	expect("{\"type\":\"training\",\"generation\":4}", check_generation, RS_EINVAL);
	expect("{\"type\":\"leave\",\"reason\":\"SIGTERM\"}", check_generation, RS_OK);
	expect("{\"type\":\"leave\",\"generation\":3}", check_generation, RS_EINVAL);
	expect("{\"type\":\"progress\",\"generation\":3}", check_generation, RS_EINVAL);
	expect("{\"type\":\"idle\",\"addr\":\"h:1\"}", check_idle, RS_OK);
	expect("{\"type\":\"idle\"}", check_idle, RS_EINVAL);
	/* an address other workers will be given: a host:port, nothing else */
	expect("{\"type\":\"idle\",\"addr\":\"[fe80::1%eth0]:7\"}", check_idle, RS_OK);
	expect("{\"type\":\"idle\",\"addr\":\"h:1\\nWARN forged\"}", check_idle, RS_EINVAL);
	expect("{\"type\":\"idle\",\"addr\":\"\"}", check_idle, RS_EINVAL);
	expect("{\"type\":\"idle\",\"addr\":\"h\"}", check_idle, RS_EINVAL);         /* no port */
	expect("{\"type\":\"idle\",\"addr\":\"[::1]\"}", check_idle, RS_EINVAL);     /* no port */
	expect("{\"type\":\"idle\",\"addr\":\"h:\"}", check_idle, RS_EINVAL);
	expect("{\"type\":\"idle\",\"addr\":\"h:123456\"}", check_idle, RS_EINVAL);
	expect("{\"type\":\"idle\",\"addr\":\"rs-worker-3.rs-worker.ns.svc:7071\"}", check_idle, RS_OK);
	expect("{\"type\":\"training\",\"generation\":4,\"step\":7,\"addr\":\"h:1\"}", check_generation, RS_OK);
	expect("{\"type\":\"training\",\"generation\":4,\"step\":7,\"addr\":\"h 1\"}", check_generation, RS_EINVAL);
	expect("{\"type\":\"paused\",\"rank\":1,\"generation\":2,\"step\":50,\"addr\":\"h;1\"}", check_paused, RS_EINVAL);
	int64_t g;
	json_t *sent;
	rs_err e = {0};
	json_t *mg = parse_ok("{\"type\":\"migrating\",\"generation\":3,\"sent\":[[2,100],[3,0]]}", "migrating");
	assert_int_equal(rs_proto_migrating(mg, &g, &sent, &e), RS_OK);
	assert_int_equal(g, 3);
	assert_int_equal(json_array_size(sent), 2);
	json_decref(mg);
	mg = parse_ok("{\"type\":\"migrating\",\"generation\":3,\"sent\":[[2,-1]]}", "migrating");
	assert_int_equal(rs_proto_migrating(mg, &g, &sent, &e), RS_EINVAL);
	json_decref(mg);
	/* checksums round-trip */
	uint64_t v[3] = {0, 1, UINT64_MAX}, back[3];
	json_t *a = rs_proto_checksums_to_json(v, 3);
	rs_err err = {0};
	assert_non_null(a);
	assert_int_equal(rs_proto_checksums(a, back, 3, &err), RS_OK);
	assert_memory_equal(v, back, sizeof(v));
	json_decref(a);
}

/* What a builder makes, its parser takes back unchanged: through text, as on the wire. */
static json_t *wire(json_t *built)
{
	assert_non_null(built);
	char *text = json_dumps(built, JSON_COMPACT);
	json_t *m;
	const char *type;
	rs_err err = {0};
	assert_int_equal(rs_proto_parse(text, strlen(text), &m, &type, &err), RS_OK);
	assert_string_equal(type, rs_proto_type_name(rs_proto_kind(built)));
	free(text);
	json_decref(built);
	return m;
}

static void test_builders_round_trip(void **state)
{
	(void)state;
	rs_err err = {0};
	json_t *m, *peers = json_pack("[s, s]", "a:1", "b:2"), *plan = json_object(), *uoo = json_pack("[i]", 1);
	uint64_t sums[2] = {1, UINT64_MAX}, back[2];

	rs_msg_join jn = {.worker = "worker-3", .addr = "h:1", .pid = 42, .protocol = RS_PROTOCOL_VERSION,
			  .incarnation = "abc", .nonce = NONCE, .proof = PROOF}, jb;
	m = wire(rs_proto_make_join(&jn));
	assert_int_equal(rs_proto_join(m, &jb, &err), RS_OK);
	assert_string_equal(jb.worker, "worker-3");
	assert_string_equal(jb.incarnation, "abc");
	assert_int_equal(jb.pid, 42);
	assert_int_equal(jb.protocol, RS_PROTOCOL_VERSION);
	json_decref(m);

	rs_msg_start st = {.generation = 3, .rank = 1, .world = 1, .union_world = 2, .peers = peers, .plan = plan,
			   .previous_plan = plan, .union_of_old = uoo, .first_step = 40, .steps = 80, .eval_every = 10,
			   .eval_samples = 100, .save = "ck", .restore = "ck/step-000000040", .last = 1}, sb;
	m = wire(rs_proto_make_start(&st));
	assert_int_equal(rs_proto_start(m, &sb, &err), RS_OK);
	assert_int_equal(sb.generation, 3);
	assert_int_equal(sb.union_world, 2);
	assert_int_equal(sb.steps, 80);
	assert_true(sb.last);
	assert_string_equal(sb.save, "ck");
	assert_string_equal(sb.restore, "ck/step-000000040");
	assert_non_null(sb.previous_plan);
	json_decref(m);

	json_t *cs = rs_proto_checksums_to_json(sums, 2);
	rs_msg_paused pa = {.rank = 1, .generation = 3, .step = 7, .addr = "h:9", .checksum = cs, .held = cs, .prepared = 8,
			    .stopped_s = 0.046},
		      pb;
	m = wire(rs_proto_make_paused(&pa));
	assert_int_equal(rs_proto_paused(m, &pb, &err), RS_OK);
	assert_int_equal(pb.prepared, 8);
	assert_float_equal(pb.stopped_s, 0.046, 1e-12);
	assert_int_equal(rs_proto_checksums(pb.checksum, back, 2, &err), RS_OK);
	assert_true(back[1] == UINT64_MAX);
	assert_non_null(pb.held);
	assert_int_equal(rs_proto_checksums(pb.held, back, 2, &err), RS_OK);
	json_decref(m);

	rs_msg_staged sa = {.generation = 4, .ok = 1, .checksum = cs, .restored = cs, .restored_rows = 12,
			    .sent_bytes = 5, .recv_bytes = 6, .move_s = 0.5},
		      sg;
	m = wire(rs_proto_make_staged(&sa));
	assert_int_equal(rs_proto_staged(m, &sg, &err), RS_OK);
	assert_true(sg.ok);
	assert_int_equal(sg.recv_bytes, 6);
	assert_int_equal(sg.restored_rows, 12);
	assert_int_equal(rs_proto_checksums(sg.restored, back, 2, &err), RS_OK);
	assert_true(back[1] == UINT64_MAX);
	json_decref(m);
	sa.ok = 0, sa.reason = "bad chunk";
	m = wire(rs_proto_make_staged(&sa));
	assert_int_equal(rs_proto_staged(m, &sg, &err), RS_OK);
	assert_false(sg.ok);
	assert_string_equal(sg.reason, "bad chunk");
	json_decref(m);
	json_decref(cs);

	rs_msg_resume ra = {5, 90, 0}, rb;
	m = wire(rs_proto_make_resume(&ra));
	assert_int_equal(rs_proto_resume(m, &rb, &err), RS_OK);
	assert_int_equal(rb.steps, 90);
	json_decref(m);

	rs_msg_progress pr = {.rank = 0, .step = 9, .loss = 0.25, .samples_per_s = 10, .auc = 0.7, .teacher_auc = -1}, pq;
	m = wire(rs_proto_make_progress(&pr));
	assert_int_equal(rs_proto_progress(m, &pq, &err), RS_OK);
	assert_true(pq.auc == 0.7 && pq.teacher_auc < 0);
	json_decref(m);

	const char *addr;
	m = wire(rs_proto_make_idle("h:3"));
	assert_int_equal(rs_proto_idle(m, &addr, &err), RS_OK);
	json_decref(m);

	int64_t g, step, rank;
	const char *why;
	json_t *sent = json_pack("[[i, I]]", 1, (json_int_t)99), *sent_back;
	m = wire(rs_proto_make_migrating(6, sent));
	assert_int_equal(rs_proto_migrating(m, &g, &sent_back, &err), RS_OK);
	assert_int_equal(g, 6);
	json_decref(m);
	json_decref(sent);
	/* a sender's counters: only the peers it sends to */
	static const uint64_t so_far[3] = {5, 0, 7}, to_send[3] = {10, 0, 7};
	sent = rs_proto_migrating_sent(so_far, to_send, 3);
	m = wire(rs_proto_make_migrating(6, sent));
	assert_int_equal(rs_proto_migrating(m, &g, &sent_back, &err), RS_OK);
	json_t *want = json_pack("[[i, i], [i, i]]", 0, 5, 2, 7);
	assert_true(json_equal(sent_back, want));
	json_decref(want);
	json_decref(m);
	json_decref(sent);

	static const rs_msg_type family[] = {RS_MSG_COMMIT, RS_MSG_COMMITTED, RS_MSG_STAGING, RS_MSG_ABORT,
					     RS_MSG_TRAINING, RS_MSG_LEAVE, RS_MSG_CATCH_UP};
	for (size_t i = 0; i < sizeof(family) / sizeof(family[0]); i++) {
		m = wire(rs_proto_make_generation(family[i], 7, 11, "because"));
		assert_int_equal(rs_proto_generation(m, &g, &step, &why, &err), RS_OK);
		assert_int_equal(g, family[i] == RS_MSG_LEAVE ? 0 : 7);
		if (family[i] == RS_MSG_TRAINING || family[i] == RS_MSG_CATCH_UP)
			assert_int_equal(step, 11);
		json_decref(m);
	}

	m = wire(rs_proto_make_done(5, 2, 100));
	assert_int_equal(rs_proto_done(m, &g, &rank, &step, &err), RS_OK);
	assert_int_equal(g, 5);
	assert_int_equal(rank, 2);
	assert_int_equal(step, 100);
	json_decref(m);
	m = wire(json_pack("{s:s, s:i, s:i}", "type", "done", "rank", 1, "step", 9)); /* an older worker's, no generation */
	assert_int_equal(rs_proto_done(m, &g, &rank, &step, &err), RS_OK);
	assert_int_equal(g, 0);
	json_decref(m);
	m = wire(json_pack("{s:s, s:i, s:i, s:i}", "type", "done", "generation", -1, "rank", 1, "step", 9));
	assert_int_equal(rs_proto_done(m, &g, &rank, &step, &err), RS_EINVAL);
	json_decref(m);

	int32_t n;
	m = wire(rs_proto_make_scale(7));
	assert_int_equal(rs_proto_scale(m, &n, &err), RS_OK);
	assert_int_equal(n, 7);
	json_decref(m);

	rs_msg_reply rp;
	m = wire(rs_proto_make_scaling(7));
	assert_int_equal(rs_proto_reply(m, &rp, &err), RS_OK);
	assert_int_equal(rp.type, RS_MSG_SCALING);
	assert_int_equal(rp.workers, 7);
	json_decref(m);
	m = wire(rs_proto_make_refused("bad join token", PROOF));
	assert_int_equal(rs_proto_reply(m, &rp, &err), RS_OK);
	assert_string_equal(rp.reason, "bad join token");
	assert_string_equal(rp.proof, PROOF);
	json_decref(m);
	m = wire(rs_proto_make_welcome(1, PROOF));
	assert_int_equal(rs_proto_reply(m, &rp, &err), RS_OK);
	assert_int_equal(rp.type, RS_MSG_WELCOME);
	json_decref(m);
	m = wire(rs_proto_make_reason(RS_MSG_ERROR, "nope"));
	assert_int_equal(rs_proto_reply(m, &rp, &err), RS_OK);
	assert_string_equal(rp.reason, "nope");
	json_decref(m);
	m = wire(rs_proto_make_plain(RS_MSG_STOP));
	assert_int_equal(rs_proto_kind(m), RS_MSG_STOP);
	assert_int_equal(rs_proto_reply(m, &rp, &err), RS_EINVAL); /* not an answer */
	json_decref(m);
	json_decref(peers);
	json_decref(plan);
	json_decref(uoo);
}

/* A worker's checkpoint report: built and read back; file names must be plain, CRCs 32 bits. */
static void test_checkpointed(void **state)
{
	(void)state;
	rs_ckpt_file_report files[2] = {{"user.r0.c0.safetensors", 0xdeadbeefu, 1234}, {"dense.safetensors", 7, 40}};
	rs_msg_checkpointed m = {.generation = 3, .rank = 0, .step = 90, .dense_params = 10, .files = files, .nfiles = 2};
	json_t *j = rs_proto_make_checkpointed(&m);
	assert_non_null(j);
	assert_int_equal(rs_proto_kind(j), RS_MSG_CHECKPOINTED);
	rs_msg_checkpointed r;
	rs_err err = {0};
	assert_int_equal(rs_proto_checkpointed(j, &r, &err), RS_OK);
	assert_int_equal(r.nfiles, 2);
	assert_int_equal(r.step, 90);
	assert_int_equal(r.dense_params, 10);
	assert_string_equal(r.files[0].file, "user.r0.c0.safetensors");
	assert_int_equal(r.files[0].crc32c, 0xdeadbeefu);
	assert_int_equal(r.files[1].bytes, 40);
	free(r.files);
	json_decref(j);
	static const char *const bad[] = {
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":[{\"file\":\"../x\",\"crc32c\":1,\"bytes\":1}]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":[{\"file\":\".hidden\",\"crc32c\":1,\"bytes\":1}]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":[{\"file\":\"a\",\"crc32c\":4294967296,\"bytes\":1}]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":[{\"file\":\"a\",\"crc32c\":1,\"bytes\":-1}]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":-1,\"step\":30,\"files\":[]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":0,\"files\":[]}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":{}}",
		"{\"type\":\"checkpointed\",\"generation\":1,\"rank\":0,\"step\":30,\"files\":[],\"extra\":1}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *type;
		rs_err e = {0};
		assert_int_equal(rs_proto_parse(bad[i], strlen(bad[i]), &j, &type, &e), RS_OK);
		if (rs_proto_checkpointed(j, &r, &e) != RS_EINVAL || r.files)
			fail_msg("accepted: %s", bad[i]);
		json_decref(j);
	}
}

static void test_kinds(void **state)
{
	(void)state;
	for (int k = 1; k < RS_MSG_TYPE_COUNT; k++) {
		json_t *m = json_pack("{s:s}", "type", rs_proto_type_name((rs_msg_type)k));
		assert_int_equal(rs_proto_kind(m), k);
		json_decref(m);
	}
	json_t *m = json_pack("{s:s}", "type", "dance");
	assert_int_equal(rs_proto_kind(m), RS_MSG_UNKNOWN);
	json_decref(m);
	assert_int_equal(rs_proto_kind(NULL), RS_MSG_UNKNOWN);
}

/* An error about what a peer sent quotes none of it raw: printable ASCII only, and short. */
static void assert_tame(const rs_err *err)
{
	assert_true(err->msg[0] != 0);
	for (const char *p = err->msg; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			fail_msg("a control character in \"%s\"", err->msg);
	assert_true(strlen(err->msg) < 120);
}

/* The parsers that face unauthenticated peers (the handshake's) never echo their keys or types verbatim. */
static void test_peer_words_in_errors(void **state)
{
	(void)state;
	static const char forged[] = "\n12:00:00.000 INFO  coordinator forged line\x1b[2J\xc2\x9b" "31m";
	char key[4200];
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = 0;
	memcpy(key, forged, sizeof(forged) - 1);
	rs_err err = {0};
	rs_msg_join j;
	rs_msg_reply r;
	const char *n, *e, *type;
	int64_t t;
	json_t *m = json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:i}", "type", "join", "worker", "w", "addr", "", "pid", 1,
			      "nonce", NONCE, "proof", PROOF, key, 1);
	assert_int_equal(rs_proto_join(m, &j, &err), RS_EINVAL);
	assert_tame(&err);
	json_decref(m);
	m = json_pack("{s:s}", "type", forged);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_proto_join(m, &j, &err), RS_EINVAL);
	assert_tame(&err);
	assert_null(strstr(err.msg, "forged")); /* the type is not quoted at all */
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_proto_reply(m, &r, &err), RS_EINVAL);
	assert_tame(&err);
	json_decref(m);
	m = json_pack("{s:s, s:s, s:s, s:i}", "type", "challenge", "nonce", NONCE, "epoch", NONCE, forged, 1);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_proto_challenge(m, &n, &e, &t, &err), RS_EINVAL);
	assert_tame(&err);
	json_decref(m);
	m = json_pack("{s:s, s:s, s:i}", "type", "refused", "reason", "r", forged, 1);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_proto_reply(m, &r, &err), RS_EINVAL);
	assert_tame(&err);
	json_decref(m);
	static const char bad_json[] = "{\"type\": \"join\", \x1b[2J\n12:00:00.000 forged}";
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_proto_parse(bad_json, sizeof(bad_json) - 1, &m, &type, &err), RS_EINVAL);
	assert_tame(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_join_handshake),
		cmocka_unit_test(test_start_and_progress),
		cmocka_unit_test(test_reshard_messages),
		cmocka_unit_test(test_builders_round_trip),
		cmocka_unit_test(test_kinds),
		cmocka_unit_test(test_checkpointed),
		cmocka_unit_test(test_peer_words_in_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
