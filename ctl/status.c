/*
 * status.c - `rowshiftctl status [--watch] [--json]`: the coordinator's
 * status stream in the terminal (README, "Status stream"). One shot: the
 * snapshot as a summary (or as JSON). --watch: then every event as it
 * comes, with a progress bar while rows move, until the job ends.
 */
#include "ctl/ctl.h"
#include "common/param.h"
#include "common/proto.h"
#include "common/control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }
static long long inum(const json_t *o, const char *key) { return (long long)json_integer_value(json_object_get(o, key)); }

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "?";
}

static void print_snapshot(const json_t *s)
{
	const json_t *job = json_object_get(s, "job"), *plan = json_object_get(s, "plan"), *m;
	size_t i;
	printf("job %s: generation %lld, %s, step %lld of %lld, %lld workers\n", str(job, "config"), inum(s, "generation"),
	       str(s, "phase"), inum(s, "step"), inum(job, "steps"), inum(s, "world"));
	if (json_is_string(json_object_get(s, "error")))
		printf("  failed: %s\n", str(s, "error"));
	const json_t *rec = json_object_get(s, "recovery");
	int healed = json_is_object(rec) && !strcmp(str(rec, "kind"), "replica");
	int partial = json_is_object(rec) && !strcmp(str(rec, "kind"), "partial");
	if (partial && !strcmp(str(rec, "type"), "recovered"))
		printf("  last recovery: partial at step %lld, %lld stale rows from the checkpoint of step %lld, no step "
		       "lost: %s\n", inum(rec, "to_step"), inum(rec, "stale_rows"), inum(rec, "restored_step"), str(rec, "reason"));
	else if (partial)
		printf("  recovering partially at step %lld from the latest checkpoint: %s\n", inum(rec, "to_step"),
		       str(rec, "reason"));
	else if (healed)
		printf("  %s from replicas at step %lld%s: %s\n",
		       !strcmp(str(rec, "type"), "recovered") ? "last recovery" : "recovering", inum(rec, "to_step"),
		       !strcmp(str(rec, "type"), "recovered") ? ", no step lost" : "", str(rec, "reason"));
	else if (json_is_object(rec) && !strcmp(str(rec, "type"), "recovered"))
		printf("  last recovery: back to step %lld from step %lld in %.2f s: %s\n", inum(rec, "to_step"),
		       inum(rec, "from_step"), num(rec, "seconds"), str(rec, "reason"));
	else if (json_is_object(rec))
		printf("  recovering: back to step %lld from step %lld: %s\n", inum(rec, "to_step"), inum(rec, "from_step"),
		       str(rec, "reason"));
	json_array_foreach(json_object_get(s, "members"), i, m) {
		json_t *rank = json_object_get(m, "rank");
		char r[32] = "-";
		if (json_is_integer(rank))
			snprintf(r, sizeof(r), "%lld", (long long)json_integer_value(rank));
		printf("  %-16s rank %-3s %-9s step %-7lld %9.0f samples/s %9.1f MiB%s%s\n", str(m, "name"), r,
		       str(m, "state"), inum(m, "step"), num(m, "samples_per_s"), num(m, "memory") / 1048576.0,
		       json_is_true(json_object_get(m, "leaving")) ? "  leaving" : "",
		       json_is_true(json_object_get(m, "connected")) ? "" : "  disconnected");
	}
	const json_t *att = json_object_get(s, "attempt");
	if (json_is_object(att) && json_is_true(json_object_get(att, "precopy")) && !strcmp(str(s, "phase"), "training"))
		printf("pre-copying generation %lld (%lld -> %lld workers) while training: %.1f of %.1f MiB sent, "
		       "%lld of %lld members done\n", inum(att, "generation"), inum(att, "from"), inum(att, "to"),
		       num(att, "moved") / 1048576.0, num(att, "total") / 1048576.0, inum(att, "precopied"),
		       inum(att, "members"));
	else if (json_is_object(att))
		printf("resharding to generation %lld (%lld -> %lld workers): %.1f of %.1f MiB moved\n",
		       inum(att, "generation"), inum(att, "from"), inum(att, "to"), num(att, "moved") / 1048576.0,
		       num(att, "total") / 1048576.0);
	if (json_is_object(plan))
		printf("plan: %zu tables, imbalance %.3f\n", json_array_size(json_object_get(plan, "tables")),
		       num(json_object_get(plan, "summary"), "imbalance"));
	size_t nh = json_array_size(json_object_get(s, "history"));
	if (nh) {
		const json_t *h = json_array_get(json_object_get(s, "history"), nh - 1);
		printf("last report: step %lld, loss %.5f, %.0f samples/s\n", inum(h, "step"), num(h, "loss"),
		       num(h, "samples_per_s"));
	}
	json_array_foreach(json_object_get(s, "reshards"), i, m)
		printf("reshard: generation %lld at step %lld, %lld -> %lld workers, paused %.3f s, moved %.2f MiB\n",
		       inum(m, "generation"), inum(m, "step"), inum(m, "from"), inum(m, "to"), num(m, "pause_s"),
		       num(m, "moved_bytes") / 1048576.0);
}

/* One event as a line; a migration as a progress bar (redrawn in place on a terminal). */
static void print_event(const json_t *e, int tty, int *bar_open)
{
	const char *type = str(e, "type");
	if (!strcmp(type, "migration")) {
		double moved = num(e, "moved"), total = num(e, "total"), f = total > 0 ? moved / total : 1;
		char bar[41];
		int fill = (int)(f * 40 + 0.5);
		for (int k = 0; k < 40; k++)
			bar[k] = k < fill ? '#' : '.';
		bar[40] = 0;
		int precopy = json_is_true(json_object_get(e, "precopy"));
		printf("%s%s rows for generation %lld: [%s] %3.0f%% %.2f/%.2f MiB", tty ? "\r" : "",
		       precopy ? "pre-copying" : "moving", inum(e, "generation"), bar, 100 * f, moved / 1048576.0,
		       total / 1048576.0);
		if (precopy)
			printf(", %lld of %lld members done", inum(e, "precopied"), inum(e, "members"));
		printf("%s", tty ? "" : "\n");
		*bar_open = tty;
		fflush(stdout);
		return;
	}
	if (*bar_open) {
		putchar('\n');
		*bar_open = 0;
	}
	if (!strcmp(type, "phase")) {
		printf("phase %s: generation %lld, step %lld", str(e, "phase"), inum(e, "generation"), inum(e, "step"));
		if (json_is_integer(json_object_get(e, "attempt")))
			printf(", attempt %lld: %lld -> %lld workers", inum(e, "attempt"), inum(e, "world"), inum(e, "to"));
		if (json_is_string(json_object_get(e, "error")))
			printf(": %s", str(e, "error"));
		putchar('\n');
	} else if (!strcmp(type, "member")) {
		printf("%s %s%s%s\n", str(e, "name"), str(e, "event"), json_is_string(json_object_get(e, "detail")) ? ": " : "",
		       json_is_string(json_object_get(e, "detail")) ? str(e, "detail") : "");
	} else if (!strcmp(type, "progress")) {
		printf("step %6lld  loss %.5f", inum(e, "step"), num(e, "loss"));
		if (json_is_number(json_object_get(e, "auc")))
			printf("  auc %.4f", num(e, "auc"));
		printf("  %9.0f samples/s\n", num(e, "samples_per_s"));
	} else if (!strcmp(type, "aborted")) {
		printf("aborted: generation %lld (%s); every member keeps generation %lld\n", inum(e, "generation"),
		       str(e, "reason"), inum(e, "kept"));
	} else if (!strcmp(type, "reshard")) {
		printf("resharded: generation %lld at step %lld, %lld -> %lld workers, paused %.3f s, moved %.2f MiB\n",
		       inum(e, "generation"), inum(e, "step"), inum(e, "from"), inum(e, "to"), num(e, "pause_s"),
		       num(e, "moved_bytes") / 1048576.0);
	} else if (!strcmp(type, "recovering") && !strcmp(str(e, "kind"), "partial")) {
		printf("recovering: %s; restoring the rows lost with every copy from the latest checkpoint\n",
		       str(e, "reason"));
	} else if (!strcmp(type, "recovering") && !strcmp(str(e, "kind"), "replica")) {
		printf("recovering: %s; rebuilding its rows from their replicas\n", str(e, "reason"));
	} else if (!strcmp(type, "recovering")) {
		printf("recovering: %s; rolling back to step %lld%s%s\n", str(e, "reason"), inum(e, "to_step"),
		       json_is_string(json_object_get(e, "checkpoint")) ? " from " : "",
		       json_is_string(json_object_get(e, "checkpoint")) ? str(e, "checkpoint") : "");
	} else if (!strcmp(type, "recovered") && !strcmp(str(e, "kind"), "partial")) {
		printf("recovered: generation %lld, %lld workers, training on from step %lld (%.2f s after the loss); %lld "
		       "stale rows restored from the checkpoint of step %lld\n", inum(e, "generation"), inum(e, "workers"),
		       inum(e, "to_step"), num(e, "seconds"), inum(e, "stale_rows"), inum(e, "restored_step"));
	} else if (!strcmp(type, "recovered")) {
		printf("recovered: generation %lld, %lld workers, training again from step %lld (%.2f s after the loss)\n",
		       inum(e, "generation"), inum(e, "workers"), inum(e, "to_step"), num(e, "seconds"));
	} else if (!strcmp(type, "snapshot")) {
		print_snapshot(e);
	}
	fflush(stdout);
}

int rs_ctl_status(int argc, char **argv)
{
	int64_t timeout_ms = 10000;
	const char *admin = NULL, *url = NULL, *token = NULL;
	bool help = false, watch = false, as_json = false;
	rs_param params[] = {
		RS_PARAM("--watch", NULL, RS_PARAM_FLAG, NULL, NULL, "keep printing events until the job ends", &watch),
		RS_PARAM("--json", NULL, RS_PARAM_FLAG, NULL, NULL, "print the stream's messages as JSON, one per line", &as_json),
		RS_PARAM("--admin-file", "ROWSHIFT_ADMIN_FILE", RS_PARAM_STR, NULL, "FILE", "the job's URL, as the coordinator wrote it (default: the one local job of this user)", &admin),
		RS_PARAM("--coordinator", "ROWSHIFT_COORDINATOR", RS_PARAM_STR, NULL, "URL", "the coordinator, ws://HOST:PORT", &url),

		RS_PARAM("--timeout-ms", NULL, RS_PARAM_INT, "10000", "MS", "how long to wait for the coordinator", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshiftctl status [--watch] [--json] [--admin-file FILE | --coordinator URL]";
	const char *pos[1];
	int npos, rc = 1, bar_open = 0, tty = isatty(STDOUT_FILENO), ended = 0;
	rs_err err = {0};
	rs_ctl_job job = {0};
	rs_control *c = NULL;
	if (rs_params_parse(params, np, argc, argv, 2, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl status: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (rs_ctl_find_job(admin, url, &job, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl status: %s\n", err.msg);
		return 1;
	}
	token = job.status_token; /* ROWSHIFT_STATUS_TOKEN or the admin file's: never on the command line */
	if (rs_control_open_status(job.url, token, (int)timeout_ms, &c, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl status: %s\n", err.msg);
		goto out;
	}
	for (;;) {
		json_t *m;
		/* the snapshot comes first and at once; after it, events come when they happen */
		rs_status st = rs_control_recv(c, watch ? 1000 : (int)timeout_ms, &m);
		if (st == RS_ETIMEDOUT && watch)
			continue;
		if (st != RS_OK) {
			if (bar_open)
				putchar('\n');
			if (ended) /* the coordinator went away after the job ended: that is the end of the stream */
				rc = ended > 0 ? 0 : 1;
			else
				fprintf(stderr, "rowshiftctl status: %s\n", st == RS_EPEER ? "the coordinator closed the stream"
											 : "no snapshot in time");
			break;
		}
		int is_snapshot = !strcmp(rs_proto_type(m), "snapshot");
		const char *phase = json_string_value(json_object_get(m, "phase"));
		if (phase && !strcmp(phase, "done"))
			ended = 1;
		else if (phase && !strcmp(phase, "failed"))
			ended = -1;
		phase = NULL; /* borrowed from m */
		if (as_json) {
			char *text = json_dumps(m, JSON_COMPACT);
			if (text)
				printf("%s\n", text);
			free(text);
			fflush(stdout);
		} else {
			print_event(m, tty, &bar_open);
		}
		json_decref(m);
		if (!watch && is_snapshot) {
			rc = 0;
			break;
		}
		if (watch && ended) {
			rc = ended > 0 ? 0 : 1;
			break;
		}
	}
out:
	rs_control_close(c);
	rs_ctl_job_free(&job);
	return rc;
}
