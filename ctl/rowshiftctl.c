/*
 * rowshiftctl - the command-line tool. Subcommands:
 *   plan        compute a sharding plan for a config and a world (optionally
 *               incrementally from a previous plan) and print it
 *   checkpoint  diff two checkpoints table by table (any world sizes)
 *   scale       rescale a running local job live (through its control channel)
 *   status      the job's state from its status stream, once or --watch (status.c)
 * rowshiftctl depends on common/ only: it speaks the control protocol
 * (common/proto.h) over the same WebSocket client the workers use.
 */
#include "ctl/ctl.h"
#include "common/checkpoint.h"
#include "common/config.h"
#include "common/control.h"
#include "common/file.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/param.h"
#include "common/plan.h"
#include "common/plandiff.h"
#include "common/planner.h"
#include "common/proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_bytes(char *buf, size_t n, uint64_t b)
{
	static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4)
		v /= 1024, i++;
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static const char *short_sharding(rs_sharding s)
{
	static const char *const names[RS_SHARD_COUNT] = {"auto", "TW", "RW", "CW", "TWRW", "GRID", "DP"};
	return (unsigned)s < RS_SHARD_COUNT ? names[s] : "?";
}

/* A TorchRec-style stats table: one line per rank, then the summary. */
static void print_plan(const rs_plan *plan, const rs_config *cfg)
{
	char mem[32], cap[32];
	print_bytes(cap, sizeof(cap), plan->world.memory_per_rank);
	printf("rank  shards       memory        cost  tables\n");
	for (int32_t r = 0; r < plan->world.ranks; r++) {
		const rs_rank_load *l = &plan->ranks[r];
		print_bytes(mem, sizeof(mem), l->memory);
		printf("%4d  %6d  %11s  %10.4g  ", r, l->nshards, mem, l->cost);
		int printed = 0, width = 0;
		for (int t = 0; t < plan->ntables && width < 60; t++) {
			const rs_table_plan *tp = &plan->tables[t];
			for (int k = 0; k < tp->nshards; k++) {
				if (tp->shards[k].rank != r)
					continue;
				width += printf("%s%s(%s)", printed++ ? " " : "", tp->name,
						short_sharding(tp->sharding));
				break;
			}
		}
		if (width >= 60)
			printf(" ...");
		printf("\n");
	}
	const rs_plan_summary *s = &plan->summary;
	printf("\nworld: %d ranks, %d per node, %s per rank", plan->world.ranks,
	       plan->world.ranks_per_node, cap);
	if (plan->world.sharding_group != plan->world.ranks)
		printf(", %d replica groups of %d ranks", plan->world.ranks / plan->world.sharding_group,
		       plan->world.sharding_group);
	printf("\ntables: %d", cfg->ntables);
	int count[RS_SHARD_COUNT] = {0};
	for (int t = 0; t < plan->ntables; t++)
		count[plan->tables[t].sharding]++;
	for (int k = 1; k < RS_SHARD_COUNT; k++)
		if (count[k])
			printf(", %d %s", count[k], rs_sharding_name((rs_sharding)k));
	printf("\nmax cost %.4g, lower bound %.4g, imbalance %.4f\n", s->max_cost, s->lower_bound,
	       s->imbalance);
	if (s->moved_bytes || s->min_moved_bytes) {
		char a[32], b[32];
		print_bytes(a, sizeof(a), s->moved_bytes);
		print_bytes(b, sizeof(b), s->min_moved_bytes);
		printf("moved %s (lower bound %s)\n", a, b);
	}
	printf("planned in %.3f ms\n", s->plan_seconds * 1e3);
}

static rs_status parse_rank_list(const char *s, int32_t **out, int *n, rs_err *err)
{
	int cap = 1;
	for (const char *c = s; *c; c++)
		cap += *c == ',';
	int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
	char *copy = strdup(s), *save = NULL;
	*n = 0;
	if (!v || !copy) {
		free(v);
		free(copy);
		return RS_ENOMEM;
	}
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int64_t x;
		if (rs_parse_int(tok, 0, RS_MAX_RANKS - 1, &x) != RS_OK) {
			free(v);
			free(copy);
			return rs_err_set(err, RS_EINVAL, "--remove: '%s' is not a rank", tok);
		}
		v[(*n)++] = (int32_t)x;
	}
	free(copy);
	*out = v;
	return RS_OK;
}

static int cmd_plan(int argc, char **argv)
{
	const char *config = NULL, *previous = NULL, *remove = NULL, *moves_out = NULL;
	int64_t world = 0, rpn = 0, group = 0;
	uint64_t memory = 0;
	bool json = false, help = false;
	rs_param params[] = {
		RS_PARAM("--config", NULL, RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--world", NULL, RS_PARAM_INT, NULL, "N", "number of ranks", &world),
		RS_PARAM("--ranks-per-node", NULL, RS_PARAM_INT, "0", "K", "ranks per node (0: the config's cluster.ranks_per_node)", &rpn),
		RS_PARAM("--memory-per-rank", NULL, RS_PARAM_BYTES, "0", "BYTES", "memory cap per rank, e.g. 16GiB (0: the config's)", &memory),
		RS_PARAM("--sharding-group", NULL, RS_PARAM_INT, "0", "S", "2D layout: ranks per replica group (0: the config's cluster.sharding_group where it fits the world, else no 2D)", &group),
		RS_PARAM("--previous", NULL, RS_PARAM_STR, NULL, "PLAN.json", "replan incrementally from this plan", &previous),
		RS_PARAM("--remove", NULL, RS_PARAM_STR, NULL, "R1,R2,...", "with --previous: these previous ranks were removed", &remove),
		RS_PARAM("--moves", NULL, RS_PARAM_STR, NULL, "FILE", "with --previous: write the list of moves (JSON) here", &moves_out),
		RS_PARAM("--json", NULL, RS_PARAM_FLAG, NULL, NULL, "print the plan as JSON", &json),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshiftctl plan --config FILE --world N [--ranks-per-node K]\n"
			    "       [--sharding-group S] [--previous PLAN.json [--remove R1,R2,...]] [--json]";
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	rs_config *cfg = NULL;
	rs_plan *prev = NULL, *plan = NULL;
	int32_t *removed = NULL, *map = NULL;
	int nremoved = 0;
	char *buf = NULL;
	size_t len = 0;
	rs_status st;

	if (rs_params_parse(params, np, argc, argv, 2, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl plan: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (!config || world <= 0) {
		fprintf(stderr, "rowshiftctl plan: --config and --world N (N >= 1) are required\n%s\n", usage);
		return 2;
	}
	if (world > RS_MAX_RANKS || rpn < 0 || rpn > RS_MAX_RANKS || group < 0 || group > RS_MAX_RANKS) {
		fprintf(stderr, "rowshiftctl plan: --world, --ranks-per-node and --sharding-group must be within 1..%d\n",
			RS_MAX_RANKS);
		return 2;
	}
	if ((remove || moves_out) && !previous) {
		fprintf(stderr, "rowshiftctl plan: --remove and --moves need --previous\n");
		return 2;
	}
	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	rs_world w = rs_world_make(cfg, (int32_t)world, (int32_t)rpn, memory, (int32_t)group);
	if (previous) {
		RSCHECKGOTO(rs_file_read(previous, RS_PLAN_MAX_BYTES, &buf, &len, &err), st, fail);
		RSCHECKGOTO(rs_plan_parse(buf, len, cfg, previous, &prev, &err), st, fail);
		if (remove)
			RSCHECKGOTO(parse_rank_list(remove, &removed, &nremoved, &err), st, fail);
		map = malloc(sizeof(int32_t) * (size_t)prev->world.ranks);
		if (!map) {
			st = RS_ENOMEM;
			goto fail;
		}
		RSCHECKGOTO(rs_planner_rank_map(prev->world.ranks, w.ranks, remove ? removed : NULL,
						nremoved, map, &err), st, fail);
	}
	RSCHECKGOTO(rs_planner_plan(cfg, &w, prev, map, &plan, &err), st, fail);
	if (moves_out) {
		rs_move *moves = NULL;
		int nmoves = 0;
		RSCHECKGOTO(rs_plan_diff(cfg, prev, plan, map, &moves, &nmoves, &err), st, fail);
		json_t *jm = rs_moves_to_json(cfg, moves, nmoves);
		free(moves);
		st = jm ? rs_file_write_json(moves_out, 0644, jm, JSON_INDENT(1), &err)
			: rs_err_set(&err, RS_ENOMEM, "%s: out of memory", moves_out);
		json_decref(jm);
		if (st != RS_OK)
			goto fail;
	}
	if (json) {
		json_t *j = rs_plan_to_json(plan);
		if (!j || json_dumpf(j, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(9)) != 0) {
			json_decref(j);
			st = rs_err_set(&err, RS_EIO, "cannot write the plan");
			goto fail;
		}
		putchar('\n');
		json_decref(j);
	} else {
		print_plan(plan, cfg);
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "rowshiftctl plan: %s\n", err.msg[0] ? err.msg : rs_status_str(st));
out:
	rs_plan_free(plan);
	rs_plan_free(prev);
	free(map);
	free(removed);
	free(buf);
	rs_config_free(cfg);
	return rc;
}

/* rowshiftctl checkpoint export DIR OUT.safetensors: one file for PyTorch users (common/checkpoint.h). */
static int export_checkpoint(const char *dir, const char *out)
{
	rs_ckpt_export_report rep;
	rs_err err = {0};
	if (rs_checkpoint_export(dir, out, &rep, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl checkpoint export: %s\n", err.msg);
		return 1;
	}
	printf("%s: %d tables of step %lld as %d tensors (embedding_bags.TABLE.weight, its optimizer state, dense.params)\n",
	       out, rep.tables, (long long)rep.step, rep.tensors);
	if (rep.skipped)
		printf("left out: the row-wise Adagrad state of %d column-wise table(s) (each column block keeps its own)\n",
		       rep.skipped);
	return 0;
}

/* rowshiftctl checkpoint diff A B [--json] [--max-rel X] | export DIR OUT */
static int cmd_checkpoint(int argc, char **argv)
{
	bool json = false, help = false;
	const char *max_rel_s = NULL;
	rs_param params[] = {
		RS_PARAM("--json", NULL, RS_PARAM_FLAG, NULL, NULL, "print the result as JSON", &json),
		RS_PARAM("--max-rel", NULL, RS_PARAM_STR, NULL, "X", "fail (exit 1) when the relative difference exceeds X", &max_rel_s),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshiftctl checkpoint diff DIR_A DIR_B [--json] [--max-rel X]\n"
			    "       rowshiftctl checkpoint export DIR OUT.safetensors";
	const char *pos[3];
	int npos;
	rs_err err = {0};
	if (rs_params_parse(params, np, argc, argv, 2, pos, 3, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl checkpoint: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (npos == 3 && !strcmp(pos[0], "export"))
		return export_checkpoint(pos[1], pos[2]);
	if (npos != 3 || strcmp(pos[0], "diff") != 0) {
		fprintf(stderr, "%s\n", usage);
		return 2;
	}
	json_t *res;
	if (rs_checkpoint_diff(pos[1], pos[2], &res, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl checkpoint diff: %s\n", err.msg);
		return 1;
	}
	double max_rel = json_real_value(json_object_get(res, "max_rel"));
	if (json) {
		json_dumpf(res, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
		putchar('\n');
	} else {
		const char *name;
		json_t *t;
		printf("%-24s %14s %14s\n", "table", "max_abs", "max_rel");
		json_object_foreach(json_object_get(res, "tables"), name, t)
			printf("%-24s %14.6g %14.6g\n", name, json_real_value(json_object_get(t, "max_abs")),
			       json_real_value(json_object_get(t, "max_rel")));
		printf("%-24s %14.6g %14.6g\n", "overall", json_real_value(json_object_get(res, "max_abs")), max_rel);
		size_t k;
		json_t *v;
		json_array_foreach(json_object_get(res, "not_compared"), k, v)
			printf("not compared: %s (in one checkpoint only, or kept per column block on different blocks)\n",
			       json_string_value(v));
		json_t *steps = json_object_get(res, "steps");
		json_int_t sa = json_integer_value(json_array_get(steps, 0)), sb = json_integer_value(json_array_get(steps, 1));
		if (sa != sb)
			printf("note: the checkpoints are of different steps (%lld and %lld)\n", (long long)sa, (long long)sb);
		if (json_is_true(json_object_get(res, "identical")))
			printf("identical\n"); /* every tensor bit for bit */
		else
			printf("differ (max_rel %.3g)\n", max_rel);
	}
	json_decref(res);
	if (max_rel_s) {
		double limit = atof(max_rel_s);
		if (!(max_rel <= limit)) {
			fprintf(stderr, "rowshiftctl checkpoint diff: relative difference %.3g exceeds %s\n", max_rel, max_rel_s);
			return 1;
		}
	}
	return 0;
}

/* rowshiftctl scale --workers N: ask a running job to go to N workers, live. */
static int cmd_scale(int argc, char **argv)
{
	int64_t workers = 0, timeout_ms = 10000;
	const char *admin = NULL, *url = NULL;
	bool help = false;
	rs_param params[] = {
		RS_PARAM("--workers", NULL, RS_PARAM_INT, "0", "N", "the number of workers to go to", &workers),
		RS_PARAM("--admin-file", "ROWSHIFT_ADMIN_FILE", RS_PARAM_STR, NULL, "FILE", "the job's URL and token, as the coordinator wrote them (default: the one local job of this user)", &admin),
		RS_PARAM("--coordinator", "ROWSHIFT_COORDINATOR", RS_PARAM_STR, NULL, "URL", "the coordinator (then the token comes from ROWSHIFT_JOIN_TOKEN)", &url),
		RS_PARAM("--timeout-ms", NULL, RS_PARAM_INT, "10000", "MS", "how long to wait for the coordinator", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshiftctl scale --workers N [--admin-file FILE | --coordinator URL]";
	const char *pos[1];
	int npos;
	rs_err err = {0};
	json_t *msg = NULL, *reply = NULL;
	rs_control *c = NULL;
	int rc = 1;
	if (rs_params_parse(params, np, argc, argv, 2, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl scale: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (workers < 1 || workers > RS_MAX_WORKERS) {
		fprintf(stderr, "rowshiftctl scale: --workers 1..%d is required\n%s\n", RS_MAX_WORKERS, usage);
		return 2;
	}
	rs_ctl_job job;
	if (rs_ctl_find_job(admin, url, &job, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl scale: %s\n", err.msg);
		return 1;
	}
	const char *token = job.token;
	url = job.url;
	if (!token) {
		fprintf(stderr, "rowshiftctl scale: no join token (ROWSHIFT_JOIN_TOKEN)\n");
		goto out;
	}
	if (rs_control_connect(url, token, "rowshiftctl", "", NULL, (int)timeout_ms, &c, &err) != RS_OK) {
		fprintf(stderr, "rowshiftctl scale: %s\n", err.msg);
		goto out;
	}
	msg = rs_proto_make_scale((int32_t)workers);
	if (!msg || rs_control_send(c, msg) != RS_OK || rs_control_recv(c, (int)timeout_ms, &reply) != RS_OK) {
		fprintf(stderr, "rowshiftctl scale: no answer from %s\n", url);
		goto out;
	}
	rs_msg_reply r;
	rs_err perr = {0};
	rs_status pst = rs_proto_reply(reply, &r, &perr);
	const char *why = pst == RS_OK ? r.reason : NULL;
	if (pst == RS_OK && r.type == RS_MSG_SCALING) {
		printf("scaling to %lld worker%s: the job reshards live (pre-copied, by default, while it trains) and resumes\n",
		       (long long)workers, workers == 1 ? "" : "s");
		rc = 0;
	} else {
		fprintf(stderr, "rowshiftctl scale: refused: %s\n", why ? why : perr.msg[0] ? perr.msg : "no reason given");
	}
out:
	json_decref(reply);
	json_decref(msg);
	rs_control_close(c);
	rs_ctl_job_free(&job);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rowshiftctl COMMAND [options]\n\n"
		   "commands:\n"
		   "  plan        compute a sharding plan (rowshiftctl plan --help)\n"
		   "  checkpoint  compare checkpoints: rowshiftctl checkpoint diff A B [--json]\n"
		   "  scale       rescale a running job live: rowshiftctl scale --workers N\n"
		   "  status      the job's state, once or --watch, from its status stream\n");
}

int main(int argc, char **argv)
{
	rs_log_init("rowshiftctl", -1);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "plan"))
		return cmd_plan(argc, argv);
	if (!strcmp(argv[1], "checkpoint"))
		return cmd_checkpoint(argc, argv);
	if (!strcmp(argv[1], "scale"))
		return cmd_scale(argc, argv);
	if (!strcmp(argv[1], "status"))
		return rs_ctl_status(argc, argv);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "rowshiftctl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
