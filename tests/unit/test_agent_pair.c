/*
 * test_agent_pair.c - tests worker/agent.c on worlds of two ranks: two
 * agents in two forked processes, each over a fake coordinator
 * (tests/unit/agent_harness.h), the two fakes meeting through shared
 * memory, the rows moving over the real TCP transport:
 *
 *   - two processes, 1 -> 2: the joiner and the old member stage, the
 *     attempt is aborted (the old member paused with its old checksum,
 *     the joiner idle), staged again and committed: the rows the old
 *     member sent are the ones the joiner received, the staged checksums
 *     add up to the old model's, a repeated commit is ignored, both train
 *     to the end;
 *   - two processes, 2 -> 1: one member gets SIGTERM mid-training, asks to
 *     leave, is drained in a reshard and ends after the commit, its rows
 *     in the survivor's model.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "tests/unit/agent_harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- two ranks, two processes ----------------------------------------------------------------- */

enum { S_READY1, S_STAGED1, S_READY2, S_STAGED2, S_PAUSED, S_END, NSLOT };

/* What the two members tell each other (and the parent): per member, per slot, a message as JSON text. */
typedef struct shared {
	volatile int set[2][NSLOT];
	char note[2][NSLOT][2048];
} shared;

static shared *sh;

static void publish(int me, int slot, const json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	snprintf(sh->note[me][slot], sizeof(sh->note[me][slot]), "%s", text ? text : "null");
	free(text);
	__sync_synchronize();
	sh->set[me][slot] = 1;
}

/* The other member's note (a new reference), waiting for it; NULL when it never came. */
static json_t *await_note(int who, int slot)
{
	for (double until = rs_now() + 30; !sh->set[who][slot]; rs_sleep(0.002))
		if (rs_now() > until)
			return NULL;
	__sync_synchronize();
	return json_loads(sh->note[who][slot], 0, NULL);
}

/* Publish msg as mine, wait for the other's note in the same slot: its "addr" into peers[other]. */
static json_t *meet(fake *f, int slot, json_t *msg, const char **peers)
{
	publish(f->me, slot, msg);
	json_t *theirs = await_note(1 - f->me, slot);
	if (!theirs) {
		fake_fail(f, "the other member never came");
		return NULL;
	}
	peers[f->me] = jstr(msg, "addr");
	peers[1 - f->me] = jstr(theirs, "addr");
	return theirs;
}

/* Both members staged: the next word to both is the same (abort or commit of gen). */
static void after_staged(fake *f, json_t *m, int slot, rs_msg_type next)
{
	publish(f->me, slot, m);
	json_t *theirs = await_note(1 - f->me, slot);
	if (!theirs || !json_is_true(json_object_get(m, "ok")) || !json_is_true(json_object_get(theirs, "ok")))
		fake_fail(f, "a member did not stage");
	else
		fake_say(f, msg_generation(next, jint(m, "generation")));
	json_decref(theirs);
}

/* Start generation gen of the 1 -> 2 growth: member 0 keeps its rows, member 1 joins. */
static void start_growth(fake *f, int64_t gen, const char **peers)
{
	start_spec s = {.generation = gen, .rank = f->me, .world = 2, .first_step = 4, .steps = 8, .last = 0, .plan = AF.p2,
			.prev = AF.p1, .peers = {peers[0], peers[1]}, .npeers = 2, .union_of_old = {0}};
	fake_say(f, msg_start(&s));
}

static void react_growth(fake *f, json_t *m)
{
	const char *peers[2];
	json_t *theirs = NULL;
	switch (rs_proto_kind(m)) {
	case RS_MSG_JOIN:
		if (f->me == 0) /* the old member trains alone first */
			fake_say(f, msg_fresh(jstr(m, "addr"), 4, 0));
		else if ((theirs = meet(f, S_READY1, m, peers)))
			start_growth(f, 2, peers);
		break;
	case RS_MSG_PAUSED:
		if (jint(m, "generation") == 3) { /* both trained the committed generation to step 8 */
			fake_say(f, msg_generation(RS_MSG_COMMIT, 3)); /* a restarted coordinator repeating itself: ignored */
			fake_say(f, msg_resume(3, 10, 1));
		} else if (f->seen[RS_MSG_PAUSED] == 1 && (theirs = meet(f, S_READY1, m, peers))) {
			publish(0, S_PAUSED, m); /* the old member, alone at step 4 */
			start_growth(f, 2, peers);
		} else if (f->seen[RS_MSG_PAUSED] == 2 && (theirs = meet(f, S_READY2, m, peers))) {
			start_growth(f, 3, peers); /* after the abort */
		}
		break;
	case RS_MSG_IDLE: /* the joiner after the abort */
		if ((theirs = meet(f, S_READY2, m, peers)))
			start_growth(f, 3, peers);
		break;
	case RS_MSG_STAGED:
		after_staged(f, m, jint(m, "generation") == 2 ? S_STAGED1 : S_STAGED2,
			     jint(m, "generation") == 2 ? RS_MSG_ABORT : RS_MSG_COMMIT);
		break;
	default:
		break;
	}
	json_decref(theirs);
}

/* Generation 1 on two ranks, both from the start; then 2 -> 1, member 1 drained (it got SIGTERM). */
static void react_shrink(fake *f, json_t *m)
{
	const char *peers[2];
	json_t *theirs = NULL;
	switch (rs_proto_kind(m)) {
	case RS_MSG_JOIN:
		if ((theirs = meet(f, S_READY1, m, peers))) {
			start_spec s = {.generation = 1, .rank = f->me, .world = 2, .steps = 4, .last = 0, .plan = AF.q2,
					.peers = {peers[0], peers[1]}, .npeers = 2};
			fake_say(f, msg_start(&s));
		}
		break;
	case RS_MSG_PROGRESS:
		if (f->me == 1 && f->seen[RS_MSG_PROGRESS] == 1)
			f->leave = 1;
		break;
	case RS_MSG_PAUSED:
		if ((theirs = meet(f, S_READY2, m, peers))) {
			publish(f->me, S_PAUSED, m);
			start_spec s = {.generation = 2, .rank = f->me, .world = 1, .first_step = 4, .steps = 8, .last = 1,
					.plan = AF.q1, .prev = AF.q2, .peers = {peers[0], peers[1]}, .npeers = 2,
					.union_of_old = {0, 1}};
			fake_say(f, msg_start(&s));
		}
		break;
	case RS_MSG_STAGED:
		after_staged(f, m, S_STAGED1, RS_MSG_COMMIT);
		break;
	default:
		break;
	}
	json_decref(theirs);
}

/* Member me's process: an agent with react as its coordinator; its end goes into slot S_END. */
static void member(int me, react_fn react)
{
	fake f;
	fake_init(&f, react, me);
	outcome o = agent_run_over(&f, 5000);
	json_t *end = json_pack("{s:i, s:i, s:s, s:s, s:i}", "st", (int)o.st, "end", (int)o.end, "err", o.err.msg, "failed",
				f.failed, "leaves", f.seen[RS_MSG_LEAVE]);
	publish(me, S_END, end);
	json_decref(end);
	fake_free(&f);
}

/* Run both members in two processes; fail unless both exit and report. */
static void run_pair(react_fn react)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	pid_t pid[2];
	for (int me = 0; me < 2; me++) {
		fflush(NULL);
		pid[me] = fork();
		assert_true(pid[me] >= 0);
		if (pid[me] == 0) {
			member(me, react);
			_exit(0);
		}
	}
	double until = rs_now() + 120;
	int done[2] = {0, 0}, status;
	while ((!done[0] || !done[1]) && rs_now() < until) {
		for (int me = 0; me < 2; me++)
			if (!done[me] && waitpid(pid[me], &status, WNOHANG) == pid[me])
				done[me] = 1;
		rs_sleep(0.01);
	}
	for (int me = 0; me < 2; me++)
		if (!done[me]) {
			kill(pid[me], SIGKILL);
			waitpid(pid[me], &status, 0);
		}
	if (!done[0] || !done[1])
		fail_msg("a member hung");
	for (int me = 0; me < 2; me++) {
		json_t *end = await_note(me, S_END);
		if (!end)
			fail_msg("member %d exited without an outcome", me);
		if (jstr(end, "failed")[0])
			fail_msg("member %d's fake coordinator: %s (the agent: %s)", me, jstr(end, "failed"), jstr(end, "err"));
		json_decref(end);
	}
}

static json_t *note(int who, int slot)
{
	json_t *j = sh->set[who][slot] ? json_loads(sh->note[who][slot], 0, NULL) : NULL;
	if (!j)
		fail_msg("member %d left no note in slot %d", who, slot);
	return j;
}

static void assert_member_ended(int who, rs_agent_end end)
{
	json_t *j = note(who, S_END);
	if (jint(j, "st") != RS_OK)
		fail_msg("member %d failed: %s", who, jstr(j, "err"));
	assert_int_equal(jint(j, "end"), end);
	json_decref(j);
}

/* The per-table checksums in message m's "checksum", into v. */
static void checksums_of(const json_t *m, uint64_t *v)
{
	rs_err err = {0};
	if (rs_proto_checksums(json_object_get(m, "checksum"), v, AF.cfg->ntables, &err) != RS_OK)
		fail_msg("a checksum: %s", err.msg);
}

static void test_two_processes_grow_abort_commit(void **state)
{
	(void)state;
	run_pair(react_growth);
	assert_member_ended(0, RS_AGENT_DONE);
	assert_member_ended(1, RS_AGENT_DONE);
	json_t *paused = note(0, S_PAUSED), *after_abort = note(0, S_READY2), *idle = note(1, S_READY2);
	json_t *st[2] = {note(0, S_STAGED2), note(1, S_STAGED2)}, *first = note(0, S_STAGED1);
	/* the abort left the old member's model as it was; the joiner went back to idle */
	assert_int_equal(rs_proto_kind(after_abort), RS_MSG_PAUSED);
	assert_int_equal(jint(after_abort, "step"), 4);
	assert_true(json_equal(json_object_get(paused, "checksum"), json_object_get(after_abort, "checksum")));
	assert_int_equal(rs_proto_kind(idle), RS_MSG_IDLE);
	assert_true(json_is_true(json_object_get(first, "ok")));
	/* what the old member sent is what the joiner received; the staged models add up to the old one */
	assert_true(jint(st[0], "sent_bytes") > 0);
	assert_true(jint(st[0], "kept_bytes") > 0);
	assert_int_equal(jint(st[0], "sent_bytes"), jint(st[1], "recv_bytes"));
	assert_int_equal(jint(st[1], "sent_bytes"), 0);
	uint64_t old[16], a[16], b[16];
	checksums_of(paused, old);
	checksums_of(st[0], a);
	checksums_of(st[1], b);
	for (int t = 0; t < AF.cfg->ntables; t++)
		assert_true(a[t] + b[t] == old[t]);
	json_decref(paused);
	json_decref(after_abort);
	json_decref(idle);
	json_decref(st[0]);
	json_decref(st[1]);
	json_decref(first);
	munmap(sh, sizeof(*sh));
}

static void test_two_processes_shrink_drains_the_leaver(void **state)
{
	(void)state;
	run_pair(react_shrink);
	assert_member_ended(0, RS_AGENT_DONE);
	assert_member_ended(1, RS_AGENT_LEFT);
	json_t *end = note(1, S_END);
	assert_int_equal(jint(end, "leaves"), 1); /* SIGTERM mid-training: asked once */
	json_decref(end);
	json_t *pa = note(0, S_PAUSED), *pb = note(1, S_PAUSED), *sa = note(0, S_STAGED1), *sb = note(1, S_STAGED1);
	assert_null(json_object_get(sb, "checksum")); /* the leaver holds nothing in the new world */
	assert_true(jint(sb, "sent_bytes") > 0);
	uint64_t a[16], b[16], now[16];
	checksums_of(pa, a);
	checksums_of(pb, b);
	checksums_of(sa, now);
	for (int t = 0; t < AF.cfg->ntables; t++)
		assert_true(now[t] == a[t] + b[t]);
	json_decref(pa);
	json_decref(pb);
	json_decref(sa);
	json_decref(sb);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_processes_grow_abort_commit),
		cmocka_unit_test(test_two_processes_shrink_drains_the_leaver),
	};
	return cmocka_run_group_tests(tests, agent_setup, agent_teardown);
}
