/*
 * rowshift-worker - one per pod (per GPU; a CPU process in local mode):
 * joins the coordinator with the join token, waits for its rank, the plan
 * and its peers' addresses, connects the transport, trains, and reports
 * progress. It exits when training is done, when the coordinator says stop,
 * or when the coordinator goes away.
 */
#include "common/config.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/plan.h"
#include "common/proto.h"
#include "worker/control.h"
#include "worker/train.h"
#include "worker/transport_tcp.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static rs_status report(rs_control *c, const rs_msg_start *s, int64_t step, double loss, double sps, double auc,
		       double teacher_auc)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:f, s:f}", "type", "progress", "rank", (json_int_t)s->rank, "step",
			      (json_int_t)step, "loss", loss, "samples_per_s", sps);
	if (!j)
		return RS_ENOMEM;
	if (auc >= 0)
		json_object_set_new(j, "auc", json_real(auc));
	if (teacher_auc >= 0)
		json_object_set_new(j, "teacher_auc", json_real(teacher_auc));
	rs_status st = rs_control_send(c, j);
	json_decref(j);
	return st;
}

/* A message with just a type, the rank, a step and optionally an address; flushed. */
static rs_status send_simple(rs_control *c, const char *type, int64_t rank, int64_t step, const char *addr, int tmo)
{
	json_t *j = json_pack("{s:s, s:I, s:I}", "type", type, "rank", (json_int_t)rank, "step", (json_int_t)step);
	if (j && addr)
		json_object_set_new(j, "addr", json_string(addr));
	rs_status st = j ? rs_control_send(c, j) : RS_ENOMEM;
	json_decref(j);
	return st == RS_OK ? rs_control_flush(c, tmo) : st;
}

/* The next start message (*msg), or *msg = NULL for a stop. Other messages are logged and skipped. */
static rs_status wait_start(rs_control *ctl, int timeout_ms, json_t **msg, rs_err *err)
{
	for (;;) {
		rs_status st = rs_control_recv(ctl, timeout_ms, msg);
		if (st != RS_OK)
			return rs_err_set(err, st, "waiting for the next generation: %s",
					  st == RS_EPEER ? "the coordinator went away" : rs_status_str(st));
		const char *type = json_string_value(json_object_get(*msg, "type"));
		if (type && !strcmp(type, "stop")) {
			json_decref(*msg);
			*msg = NULL;
			return RS_OK;
		}
		if (type && !strcmp(type, "start"))
			return RS_OK;
		RS_WARN("ignoring a '%s' message while waiting for a start", type ? type : "(untyped)");
		json_decref(*msg);
	}
}

/* The union transport of a generation, and the training world's view of it (NULL for a leaving member). */
static rs_status connect_generation(const rs_msg_start *s, int lfd, const char *token, int tmo, rs_transport **uni,
				    rs_transport **train, rs_err *err)
{
	const char **addrs = malloc(sizeof(char *) * (size_t)s->union_world);
	rs_status st;
	*uni = *train = NULL;
	if (!addrs) {
		close(lfd);
		return RS_ENOMEM;
	}
	for (int64_t i = 0; i < s->union_world; i++)
		addrs[i] = json_string_value(json_array_get(s->peers, (size_t)i));
	rs_tcp_config tc = {.rank = (int32_t)s->rank, .world = (int32_t)s->union_world, .addrs = addrs,
			    .listen_fd = lfd, .token = token, .generation = (uint64_t)s->generation, .timeout_ms = tmo};
	st = rs_tcp_transport_create(&tc, uni, err);
	free(addrs);
	if (st == RS_OK && s->rank < s->world && (st = rs_transport_subset(*uni, (int32_t)s->world, train)) != RS_OK) {
		rs_transport_destroy(*uni);
		*uni = NULL;
	}
	return st;
}

/*
 * Handle what the coordinator sent since the last step: "pause" asks for a
 * pause at the next step boundary (agreed with the other ranks inside the
 * step), "stop" ends the worker.
 */
static rs_status drain_control(rs_control *ctl, rs_trainer *tr, int *stop)
{
	json_t *m;
	while (rs_control_recv(ctl, 0, &m) == RS_OK) {
		const char *type = json_string_value(json_object_get(m, "type"));
		if (type && !strcmp(type, "pause"))
			rs_trainer_request_pause(tr);
		else if (type && !strcmp(type, "stop"))
			*stop = 1;
		else
			RS_WARN("ignoring a '%s' message during training", type ? type : "(untyped)");
		json_decref(m);
	}
	return rs_control_poll(ctl);
}

/*
 * Train steps [first_step, steps), evaluating and reporting as configured.
 * *end gets the step training stopped before: `steps`, or earlier when the
 * ranks agreed to pause; *stop is set when the coordinator said stop.
 */
static rs_status train_until(const rs_config *cfg, rs_trainer *tr, rs_transport *t, rs_control *ctl,
			     const rs_msg_start *s, int64_t *end, int *stop, rs_err *err)
{
	/* rank 0 tells the coordinator the ceiling once, with its first report */
	double teacher_auc = s->rank == 0 && s->first_step == 0 ? rs_trainer_teacher_auc(tr, s->eval_samples) : -1;
	double t0 = rs_now();
	int64_t since = s->first_step;
	rs_status st;
	for (int64_t step = s->first_step; step < s->steps; step++) {
		rs_step_stats stats;
		if ((st = rs_trainer_step(tr, step, &stats)) != RS_OK)
			return rs_err_set(err, st, "step %lld: %s", (long long)step, rs_transport_error(t));
		int last = step + 1 == s->steps, eval = s->eval_every > 0 && ((step + 1) % s->eval_every == 0 || last);
		double auc = -1, ll;
		if (eval && (st = rs_trainer_evaluate(tr, s->eval_samples, &auc, &ll)) != RS_OK)
			return rs_err_set(err, st, "evaluation at step %lld: %s", (long long)step, rs_transport_error(t));
		double t1 = rs_now();
		if (eval || step % 10 == 9 || last || step == s->first_step) {
			double sps = (double)cfg->train.global_batch * (double)(step + 1 - since) / (t1 - t0);
			RSCHECK(report(ctl, s, step, stats.loss, sps, auc, teacher_auc));
			teacher_auc = -1;
			t0 = t1;
			since = step + 1;
		}
		if (drain_control(ctl, tr, stop) != RS_OK)
			return rs_err_set(err, RS_EPEER, "the coordinator went away at step %lld", (long long)step);
		if (*stop || (stats.pause && !last)) {
			*end = step + 1;
			return RS_OK;
		}
	}
	*end = s->steps;
	return RS_OK;
}

int main(int argc, char **argv)
{
	const char *url = NULL, *config = NULL, *name = NULL, *host = NULL;
	int64_t timeout_ms = 30000;
	bool help = false;
	rs_param params[] = {
		RS_PARAM("--coordinator", "ROWSHIFT_COORDINATOR", RS_PARAM_STR, NULL, "URL", "the coordinator's control channel, ws://HOST:PORT", &url),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--name", "POD_NAME", RS_PARAM_STR, NULL, "NAME", "this worker's name (the pod name)", &name),
		RS_PARAM("--host", "POD_IP", RS_PARAM_STR, "127.0.0.1", "ADDR", "address peers reach this worker's transport on", &host),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "30000", "MS", "bound on every wait", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-worker --coordinator ws://HOST:PORT --config FILE [--name NAME]\n"
			    "  the join token comes from ROWSHIFT_JOIN_TOKEN";
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	char buf[64], addr[300];
	rs_config *cfg = NULL;
	rs_plan *plan = NULL;
	rs_control *ctl = NULL;
	rs_transport *t = NULL, *uni = NULL;
	rs_trainer *tr = NULL;
	json_t *msg = NULL;
	int lfd = -1, port;
	rs_status st;

	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-worker: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	const char *token = getenv("ROWSHIFT_JOIN_TOKEN");
	if (!url || !config || !token || !*token) {
		fprintf(stderr, "rowshift-worker: --coordinator, --config and ROWSHIFT_JOIN_TOKEN are required\n%s\n", usage);
		return 2;
	}
	if (!name) {
		snprintf(buf, sizeof(buf), "worker-%d", (int)getpid());
		name = buf;
	}
	rs_log_init(name, -1);
	int tmo = (int)(timeout_ms > 0 && timeout_ms < 3600000 ? timeout_ms : 30000);

	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	RSCHECKGOTO(rs_tcp_listen(host, 0, &lfd, &port, &err), st, fail);
	snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	RSCHECKGOTO(rs_control_connect(url, token, name, addr, tmo, &ctl, &err), st, fail);
	RS_INFO("joined %s; transport on %s", url, addr);

	/* generations: start (fresh, or a reshard from the previous plan), train, then pause or finish */
	for (;;) {
		rs_msg_start s;
		RSCHECKGOTO(wait_start(ctl, 4 * tmo, &msg, &err), st, fail);
		if (!msg) {
			RS_INFO("stopped by the coordinator");
			rc = 0;
			goto out;
		}
		RSCHECKGOTO(rs_proto_start(msg, &s, &err), st, fail);
		rs_plan *next = NULL, *prev = NULL;
		rs_trainer *ntr = NULL;
		rs_transport *nuni = NULL, *nt = NULL;
		st = rs_plan_from_json(s.plan, cfg, "start message plan", &next, &err);
		if (st == RS_OK && s.previous_plan)
			st = rs_plan_from_json(s.previous_plan, cfg, "start message previous plan", &prev, &err);
		if (st == RS_OK)
			st = connect_generation(&s, lfd, token, tmo, &nuni, &nt, &err);
		lfd = -1; /* the transport owns it now */
		double r0 = rs_now();
		if (st == RS_OK)
			st = prev ? rs_trainer_reshard(cfg, tr, prev, next, nuni, nt, &ntr, &err)
				  : rs_trainer_create(cfg, next, nt, &ntr, &err);
		rs_plan_free(prev);
		if (st != RS_OK) {
			rs_transport_destroy(nt);
			rs_transport_destroy(nuni);
			rs_plan_free(next);
			goto fail;
		}
		if (s.previous_plan)
			RS_INFO("generation %lld: resharded in %.3f s", (long long)s.generation, rs_now() - r0);
		rs_trainer_destroy(tr);
		rs_transport_destroy(t);
		rs_transport_destroy(uni);
		rs_plan_free(plan);
		tr = ntr, t = nt, uni = nuni, plan = next;
		if (!tr) { /* this worker left the world: its rows are with the others now */
			RSCHECKGOTO(send_simple(ctl, "done", s.rank, s.first_step, NULL, tmo), st, fail);
			RS_INFO("handed my rows over at step %lld; leaving", (long long)s.first_step);
			rc = 0;
			goto out;
		}
		RS_INFO("rank %lld of %lld, generation %lld: training steps %lld..%lld", (long long)s.rank,
			(long long)s.world, (long long)s.generation, (long long)s.first_step, (long long)s.steps - 1);
		int64_t end = s.steps;
		int stop = 0;
		RSCHECKGOTO(train_until(cfg, tr, t, ctl, &s, &end, &stop, &err), st, fail);
		if (stop) {
			RS_INFO("stopped by the coordinator at step %lld", (long long)end);
			rc = 0;
			goto out;
		}
		if (s.last && end == s.steps) {
			if (s.save) {
				RSCHECKGOTO(rs_trainer_save(tr, s.save, s.steps, &err), st, fail);
				RS_INFO("checkpoint written to %s", s.save);
			}
			RSCHECKGOTO(send_simple(ctl, "done", s.rank, s.steps, NULL, tmo), st, fail);
			RS_INFO("done");
			rc = 0;
			goto out;
		}
		/* pause at the boundary, listening for the next generation's transport */
		RSCHECKGOTO(rs_tcp_listen(host, 0, &lfd, &port, &err), st, fail);
		snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
		RSCHECKGOTO(send_simple(ctl, "paused", s.rank, end, addr, tmo), st, fail);
		json_decref(msg);
		msg = NULL;
	}
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	if (t)
		rs_transport_abort(t);
out:
	json_decref(msg);
	rs_trainer_destroy(tr);
	rs_transport_destroy(t);
	rs_transport_destroy(uni);
	if (lfd >= 0)
		close(lfd);
	rs_control_close(ctl);
	rs_plan_free(plan);
	rs_config_free(cfg);
	return rc;
}
