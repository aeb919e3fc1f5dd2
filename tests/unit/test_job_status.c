/*
 * test_job_status.c - what the coordinator's job tells status clients (the
 * status stream, coordinator/job_events.c), on the job harness
 * (tests/unit/job_harness.h): migration progress paced to ten messages a
 * second without losing the latest. The messages of each phase are checked
 * beside the phases themselves in test_job.c.
 */
#include "tests/unit/job_harness.h"

/* Member k's report of its rows sent so far in generation 2: `bytes` to union rank 2. */
static void sent_to_2(int k, int bytes)
{
	json_t *sent = json_pack("[[i,i]]", 2, bytes);
	say(k, rs_proto_make_migrating(2, sent)); /* takes a reference of its own */
	json_decref(sent);
}

/* Migration progress within a tenth of a second of the last is held back, not lost: the latest goes out next. */
static void test_migration_progress_held_back_goes_out_later(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	tick(0.2);
	sent_to_2(0, 100);
	assert_int_equal(json_integer_value(json_object_get(published("migration"), "moved")), 100);
	int before = H.published;
	sent_to_2(0, 300); /* at once: held */
	assert_int_equal(H.published, before);
	tick(0.05);
	assert_int_equal(H.published, before); /* still within the tenth */
	tick(0.1);
	assert_int_equal(H.published, before + 1);
	assert_int_equal(json_integer_value(json_object_get(published("migration"), "moved")), 300);
	tick(0.2);
	assert_int_equal(H.published, before + 1); /* once */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_migration_progress_held_back_goes_out_later, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
