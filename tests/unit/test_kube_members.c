/*
 * test_kube_members.c - the Kubernetes membership source's state saves
 * (coordinator/kube_members.c) against a ConfigMap kept here: the API
 * calls it makes are wrapped (-Wl,--wrap, WRAP_test_kube_members in the
 * Makefile), so each test says what the server does. A write whose
 * answer was lost but which landed makes the next write conflict: the
 * coordinator must find its own text there and go on, and must stop
 * (exit 3) when the text is anyone else's, even with writes of its own
 * unanswered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "coordinator/kube_members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The API server, as far as the state's ConfigMap goes. */
static struct {
	json_t *stored; /* the ConfigMap (NULL: none) */
	int rv;         /* its resourceVersion */
	int lose;       /* the next N writes land, and their answer is lost */
	int down;       /* writes fail without landing (nothing listens) */
	int bad_reads;  /* the next N reads fail */
	int writes, reads;
} S;

rs_status __wrap_rs_kube_configmap_write(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err);
rs_status __wrap_rs_kube_configmap_read(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err);
const char *__wrap_rs_kube_namespace(const rs_kube *k);
int __wrap_rs_lease_tick(rs_lease *l);
void __wrap_rs_lease_release(rs_lease *l);

rs_status __wrap_rs_kube_configmap_write(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err)
{
	(void)k, (void)timeout_ms;
	S.writes++;
	if (S.down)
		return rs_err_set(err, RS_ECURL, "kubernetes: PUT configmaps/%s: Couldn't connect to server", name);
	const char *rv = json_string_value(json_object_get(json_object_get(*obj, "metadata"), "resourceVersion"));
	if ((rv == NULL) != (S.stored == NULL) || (rv && atoi(rv) != S.rv))
		return rs_err_set(err, RS_EABORTED, "kubernetes: configmap %s was written by someone else", name);
	json_decref(S.stored);
	S.stored = json_deep_copy(*obj);
	assert_non_null(S.stored);
	char v[32];
	snprintf(v, sizeof(v), "%d", ++S.rv);
	json_object_set_new(json_object_get(S.stored, "metadata"), "resourceVersion", json_string(v));
	if (S.lose > 0) {
		S.lose--;
		return rs_err_set(err, RS_ECURL, "kubernetes: PUT configmaps/%s: Empty reply from server", name);
	}
	json_decref(*obj);
	*obj = json_deep_copy(S.stored);
	return RS_OK;
}

rs_status __wrap_rs_kube_configmap_read(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err)
{
	(void)k, (void)timeout_ms;
	S.reads++;
	if (S.bad_reads > 0) {
		S.bad_reads--;
		return rs_err_set(err, RS_ECURL, "kubernetes: GET configmaps/%s: Operation timed out", name);
	}
	if (!S.stored)
		return RS_ENOTFOUND;
	*obj = json_deep_copy(S.stored);
	return RS_OK;
}

const char *__wrap_rs_kube_namespace(const rs_kube *k)
{
	(void)k;
	return "rowshift";
}

int __wrap_rs_lease_tick(rs_lease *l)
{
	(void)l;
	return 0; /* held */
}

void __wrap_rs_lease_release(rs_lease *l) { (void)l; }

static rs_kube_members M;
static rs_job_source src;

static int setup(void **state)
{
	(void)state;
	memset(&S, 0, sizeof(S));
	memset(&M, 0, sizeof(M));
	M.statefulset = "rowshift-worker", M.configmap = "rowshift-state", M.term = 2;
	src = rs_kube_members_source(&M);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rs_kube_members_handler(&M).closing(&M);
	json_decref(S.stored);
	return 0;
}

/* The state at `step` (what tells one write's text from another's). */
static rs_status save(int64_t step, int patient)
{
	json_t *plan = json_pack("{s:i}", "tables", 1);
	char *world[] = {"rowshift-worker-0"};
	rs_state s = {.phase = RS_STATE_TRAINING, .generation = 3, .step = step, .plan = plan, .world = world,
		      .nworld = 1, .config = "/etc/rowshift/model.json", .url = "ws://coordinator:7070"};
	rs_err err = {0};
	rs_status st = src.save_state(src.ctx, &s, patient, &err);
	json_decref(plan);
	return st;
}

/* The step of the state the ConfigMap holds. */
static int64_t stored_step(void)
{
	const char *text = json_string_value(json_object_get(json_object_get(S.stored, "data"), "state.json"));
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	int64_t step = json_integer_value(json_object_get(j, "step"));
	json_decref(j);
	return step;
}

/* Another coordinator writes the state (the step tells it apart). */
static void successor_writes(int64_t step)
{
	char text[64];
	snprintf(text, sizeof(text), "{\"step\": %lld, \"term\": %lld}", (long long)step, (long long)M.term);
	json_object_set_new(json_object_get(S.stored, "data"), "state.json", json_string(text));
	char v[32];
	snprintf(v, sizeof(v), "%d", ++S.rv);
	json_object_set_new(json_object_get(S.stored, "metadata"), "resourceVersion", json_string(v));
}

/* f in a child: its exit status (3: it stopped acting, deposed). */
static int in_child(rs_status (*f)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(f() == RS_OK ? 0 : 1);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static rs_status save_60(void) { return save(60, 0); }

static void test_saves_land_on_the_version_last_written(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK); /* created */
	assert_int_equal(save(20, 0), RS_OK);
	assert_int_equal(stored_step(), 20);
	assert_int_equal(S.rv, 2);
	assert_int_equal(S.writes, 2);
}

/* An impatient save that finds the API away fails at once, without landing, and without retries. */
static void test_an_impatient_save_tries_once(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK);
	S.down = 1;
	assert_int_equal(save(20, 0), RS_ECURL);
	assert_int_equal(S.writes, 2);
	S.down = 0;
	assert_int_equal(save(30, 0), RS_OK); /* nothing had landed: no conflict */
	assert_int_equal(stored_step(), 30);
}

/* Two writes landed with their answers lost; the next conflicts, finds one of its own texts, and goes on from it. */
static void test_a_lost_answer_that_landed_is_its_own(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK);
	S.lose = 1;
	assert_int_equal(save(20, 0), RS_ECURL); /* landed */
	assert_int_equal(stored_step(), 20);
	assert_int_equal(save(30, 0), RS_OK); /* conflict, read: its own step-20 text; written again on that version */
	assert_int_equal(stored_step(), 30);
	assert_int_equal(S.reads, 1);
	assert_int_equal(S.writes, 4);
}

/* The read after the conflict fails: not known yet, so a transient failure, and asked again at the next save. */
static void test_an_unread_conflict_is_transient(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK);
	S.lose = 1;
	assert_int_equal(save(20, 0), RS_ECURL);
	S.bad_reads = 1;
	assert_int_equal(save(30, 0), RS_EIO);
	assert_int_equal(save(40, 0), RS_OK);
	assert_int_equal(stored_step(), 40);
}

/* The ConfigMap holds another coordinator's state: this one stops acting (exit 3). */
static void test_another_coordinators_write_deposes(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK);
	successor_writes(50);
	assert_int_equal(in_child(save_60), 3);
	assert_int_equal(stored_step(), 50); /* the child wrote nothing over it */
}

/* Writes of its own unanswered, then a successor's write on top: not its own text, so it stops. */
static void test_a_successor_after_a_lost_answer_deposes(void **state)
{
	(void)state;
	assert_int_equal(save(10, 1), RS_OK);
	S.lose = 1;
	assert_int_equal(save(20, 0), RS_ECURL); /* landed */
	successor_writes(50);                     /* then another coordinator, of the same term, wrote on it */
	assert_int_equal(in_child(save_60), 3);
	assert_int_equal(stored_step(), 50);      /* the child wrote nothing over it */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_saves_land_on_the_version_last_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_impatient_save_tries_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_lost_answer_that_landed_is_its_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_unread_conflict_is_transient, setup, teardown),
		cmocka_unit_test_setup_teardown(test_another_coordinators_write_deposes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_successor_after_a_lost_answer_deposes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
