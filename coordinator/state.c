/*
 * state.c - see state.h. The reader trusts nothing: a state file may be
 * truncated by a full disk, edited by hand or left by another version, and
 * a restarted coordinator must say which field is wrong instead of crashing.
 */
#include "coordinator/state.h"
#include "common/config.h"
#include "common/file.h"
#include "common/proto.h"
#include "common/zjson.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT "rowshift-coordinator-state"
#define VERSION 2 /* 2: plans deflated (zjson.h); 1 (plans as objects) is still read */
#define MAX_NAME 63
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-" /* as a join allows */

static const char *const phase_names[] = {"training", "migrating", "committing", "done", "failed"};

const char *rs_state_phase_name(rs_state_phase p)
{
	return (unsigned)p < sizeof(phase_names) / sizeof(phase_names[0]) ? phase_names[p] : "?";
}

/* ---- writing --------------------------------------------------------------------- */

static json_t *names_json(char *const *v, int32_t n)
{
	json_t *a = json_array();
	for (int32_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_string(v[i])) != 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static json_t *ints_json(const int32_t *v, int32_t n)
{
	json_t *a = json_array();
	for (int32_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer(v[i])) != 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* A plan as the state keeps it: a zjson string (a JSON null without memory, which fails the pack). */
static json_t *plan_json(const json_t *plan)
{
	char *z = rs_zjson_encode(plan);
	json_t *v = z ? json_string(z) : NULL;
	free(z);
	return v;
}

json_t *rs_state_to_json(const rs_state *s)
{
	json_t *sched = json_array(), *workers = json_array(), *attempt = NULL;
	for (int i = 0; sched && i < s->nsched; i++)
		json_array_append_new(sched, json_pack("[I, i]", (json_int_t)s->sched_step[i], (int)s->sched_workers[i]));
	for (int i = 0; workers && i < s->nworkers; i++)
		json_array_append_new(workers, json_pack("{s:s, s:I}", "name", s->workers[i].name, "pid",
							 (json_int_t)s->workers[i].pid));
	if (s->attempt_generation)
		attempt = json_pack("{s:I, s:o, s:o, s:i, s:o, s:o, s:s*}", "generation", (json_int_t)s->attempt_generation,
				    "plan", plan_json(s->attempt_plan), "union", names_json(s->uni, s->nuni), "world", (int)s->attempt_world,
				    "union_of_old", ints_json(s->union_of_old, s->nworld), "before",
				    rs_proto_checksums_to_json(s->before, s->nbefore), "restore", s->restore);
	if (s->attempt_generation && !attempt) {
		json_decref(sched), json_decref(workers);
		return NULL;
	}
	json_t *job = json_pack("{s:s, s:I, s:s*, s:s, s:s*, s:o, s:i, s:o}", "config", s->config, "steps",
				(json_int_t)s->steps, "save", s->save, "url", s->url, "token", s->token, "schedule", sched,
				"replicas", (int)s->replicas, "workers", workers);
	if (job && s->ckpt_dir &&
	    json_object_set_new(job, "checkpoints", json_pack("{s:s, s:I, s:I, s:I}", "dir", s->ckpt_dir, "every",
								(json_int_t)s->ckpt_every, "interval",
								(json_int_t)s->ckpt_interval, "keep", (json_int_t)s->ckpt_keep)))
		json_decref(job), job = NULL;
	json_t *incs = json_object();
	for (int i = 0; incs && i < s->ninc; i++)
		if (json_object_set_new(incs, s->inc_names[i], json_string(s->inc_values[i])) != 0) {
			json_decref(incs);
			incs = NULL;
		}
	json_t *root = json_pack("{s:s, s:i, s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:i, s:i, s:o, s:o}", "format", FORMAT,
				 "version", VERSION, "phase", rs_state_phase_name(s->phase), "generation",
				 (json_int_t)s->generation, "step", (json_int_t)s->step, "bound", (json_int_t)s->bound,
				 "plan", plan_json(s->plan), "world", names_json(s->world, s->nworld), "attempt",
				 attempt ? attempt : json_null(), "attempts", s->attempts, "next_schedule",
				 s->next_schedule, "job", job, "incarnations", incs);
	if (root && s->phase == RS_STATE_FAILED && json_object_set_new(root, "error", json_string(s->error ? s->error : "")))
		json_decref(root), root = NULL;
	if (root && s->reached > 0 && json_object_set_new(root, "reached", json_integer(s->reached)))
		json_decref(root), root = NULL;
	if (root && s->model && json_object_set_new(root, "model", json_string(s->model)))
		json_decref(root), root = NULL;
	if (root && s->term && json_object_set_new(root, "term", json_integer(s->term)))
		json_decref(root), root = NULL;
	if (root && s->last_generation > s->generation &&
	    json_object_set_new(root, "last_generation", json_integer(s->last_generation)))
		json_decref(root), root = NULL;
	return root;
}

rs_status rs_state_write(const char *path, const rs_state *s, rs_err *err)
{
	json_t *root = rs_state_to_json(s);
	if (!root)
		return rs_err_set(err, RS_ENOMEM, "state %s: out of memory", path);
	rs_status st = rs_file_write_json(path, 0600, root, JSON_COMPACT, err);
	json_decref(root);
	return st;
}

/* ---- reading ---------------------------------------------------------------------- */

static rs_status bad(rs_err *err, const char *name, const char *field, const char *what)
{
	return rs_err_set(err, RS_EINVAL, "%s: field '%s': %s", name, field, what);
}

/* A JSON array of 1..max worker names (1..63 printable bytes each), copied. */
static rs_status get_names(const json_t *a, int32_t max, const char *name, const char *field, char ***out,
			   int32_t *n, rs_err *err)
{
	size_t i;
	json_t *e;
	if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > (size_t)max)
		return bad(err, name, field, "must be an array of worker names");
	*out = calloc(json_array_size(a), sizeof(char *));
	if (!*out)
		return RS_ENOMEM;
	json_array_foreach(a, i, e) {
		const char *v = json_string_value(e);
		if (!v || !*v || strlen(v) > MAX_NAME || strspn(v, NAME_CHARS) != strlen(v))
			return bad(err, name, field, "a name is not 1..63 letters, digits, '.', '_' or '-'");
		for (size_t k = 0; k < i; k++)
			if (!strcmp((*out)[k], v))
				return bad(err, name, field, "a name appears twice");
		if (!((*out)[i] = strdup(v)))
			return RS_ENOMEM;
		*n = (int32_t)i + 1;
	}
	return RS_OK;
}

static rs_status dup_str(const char *v, char **out)
{
	if (!v)
		return RS_OK;
	*out = strdup(v);
	return *out ? RS_OK : RS_ENOMEM;
}

/* A plan field: a zjson string (version 2) or a plan object (version 1); *out a new reference. */
static rs_status get_plan(json_t *v, const char *name, const char *field, json_t **out, rs_err *err)
{
	if (!json_is_object(v) && !json_is_string(v))
		return bad(err, name, field, "must be a plan");
	char where[512];
	snprintf(where, sizeof(where), "%s: %s", name, field);
	return rs_zjson_object(v, RS_STATE_MAX_BYTES, where, out, err);
}

static rs_status parse_attempt(json_t *a, const char *name, rs_state *s, rs_err *err)
{
	json_error_t jerr;
	json_int_t gen, world;
	json_t *plan, *uni, *uoo, *before;
	const char *restore = NULL;
	if (json_unpack_ex(a, &jerr, JSON_STRICT, "{s:I, s:o, s:o, s:I, s:o, s:o, s?s}", "generation", &gen, "plan", &plan,
			   "union", &uni, "world", &world, "union_of_old", &uoo, "before", &before, "restore", &restore) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: attempt: %s", name, jerr.text);
	if (restore && (!*restore || !(s->restore = strdup(restore))))
		return *restore ? RS_ENOMEM : bad(err, name, "attempt.restore", "must be a checkpoint directory");
	if (gen <= s->generation)
		return bad(err, name, "attempt.generation", "must be after the committed generation");
	RSCHECK(get_plan(plan, name, "attempt.plan", &s->attempt_plan, err));
	s->attempt_generation = gen;
	RSCHECK(get_names(uni, RS_STATE_MAX_MEMBERS, name, "attempt.union", &s->uni, &s->nuni, err));
	if (world < 1 || world > s->nuni)
		return bad(err, name, "attempt.world", "must be 1..the size of the union");
	s->attempt_world = (int32_t)world;
	if (!json_is_array(uoo) || json_array_size(uoo) != (size_t)s->nworld)
		return bad(err, name, "attempt.union_of_old", "must have one entry per member of the world");
	if (!(s->union_of_old = calloc((size_t)s->nworld, sizeof(int32_t))))
		return RS_ENOMEM;
	for (int32_t r = 0; r < s->nworld; r++) {
		json_t *e = json_array_get(uoo, (size_t)r);
		if (json_is_integer(e) && json_integer_value(e) == -1) { /* lost with its rows (healing from replicas) */
			s->union_of_old[r] = -1;
			continue;
		}
		if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= s->nuni ||
		    strcmp(s->uni[json_integer_value(e)], s->world[r]) != 0)
			return bad(err, name, "attempt.union_of_old", "an entry does not point at that member in the union");
		s->union_of_old[r] = (int32_t)json_integer_value(e);
	}
	s->nbefore = (int)json_array_size(before);
	if (!json_is_array(before) || s->nbefore > 1000000)
		return bad(err, name, "attempt.before", "must be an array of checksums");
	if (!(s->before = calloc((size_t)s->nbefore + 1, sizeof(uint64_t))))
		return RS_ENOMEM;
	rs_err why = {0};
	if (rs_proto_checksums(before, s->before, s->nbefore, &why) != RS_OK)
		return rs_err_set(err, RS_EINVAL, "%s: field 'attempt.before': %s", name, why.msg);
	return RS_OK;
}

static rs_status parse_incarnations(json_t *incs, const char *name, rs_state *s, rs_err *err)
{
	const char *key;
	json_t *v;
	size_t n = json_object_size(incs);
	if (!json_is_object(incs) || n > (size_t)2 * RS_STATE_MAX_MEMBERS)
		return bad(err, name, "incarnations", "must be an object of at most one entry per member");
	if (!(s->inc_names = calloc(n + 1, sizeof(char *))) || !(s->inc_values = calloc(n + 1, sizeof(char *))))
		return RS_ENOMEM;
	json_object_foreach(incs, key, v) {
		const char *inc = json_string_value(v);
		if (!inc || !*key || strlen(key) > MAX_NAME || strlen(inc) > 64 ||
		    strspn(inc, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-") != strlen(inc))
			return bad(err, name, "incarnations", "entries must be a member's name and its incarnation (at most 64 "
				   "letters or digits)");
		s->inc_names[s->ninc] = strdup(key);
		s->inc_values[s->ninc] = strdup(inc);
		s->ninc++;
		if (!s->inc_names[s->ninc - 1] || !s->inc_values[s->ninc - 1])
			return RS_ENOMEM;
	}
	return RS_OK;
}

static rs_status parse_job(json_t *job, const char *name, rs_state *s, rs_err *err)
{
	json_error_t jerr;
	const char *config, *save = NULL, *url, *token = NULL, *ckdir;
	json_int_t steps, replicas;
	json_t *sched, *workers, *e, *ck = NULL;
	size_t i;
	if (json_unpack_ex(job, &jerr, JSON_STRICT, "{s:s, s:I, s?s, s:s, s?s, s:o, s:I, s:o, s?o}", "config", &config,
			   "steps", &steps, "save", &save, "url", &url, "token", &token, "schedule", &sched, "replicas",
			   &replicas, "workers", &workers, "checkpoints", &ck) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: job: %s", name, jerr.text);
	if (ck) { /* the ranges --checkpoint-dir, -every, -interval and -keep take */
		json_int_t every, interval, keep;
		if (json_unpack_ex(ck, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I}", "dir", &ckdir, "every", &every, "interval",
				   &interval, "keep", &keep) != 0 ||
		    !*ckdir || strlen(ckdir) > 4000 || every < 0 || every > ((int64_t)1 << 40) || interval < 0 ||
		    interval > 31536000 || (every == 0 && interval == 0) || keep < 1 || keep > 1000)
			return bad(err, name, "job.checkpoints", "must be {dir: 1..4000 bytes, every: 0..2^40, interval: "
				   "0..31536000 (not both 0), keep: 1..1000}");
		RSCHECK(dup_str(ckdir, &s->ckpt_dir));
		s->ckpt_every = every, s->ckpt_interval = interval, s->ckpt_keep = keep;
	}
	if (!*config || !*url || (token && (!*token || strlen(token) > 1024)))
		return bad(err, name, "job", "config, url and token (when there is one) must be non-empty (the token at most 1024 "
					       "bytes)");
	if (steps < 0 || replicas < 0 || replicas > RS_STATE_MAX_MEMBERS)
		return bad(err, name, "job", "steps and replicas must be >= 0");
	s->steps = steps;
	s->replicas = (int32_t)replicas;
	RSCHECK(dup_str(config, &s->config));
	RSCHECK(dup_str(save, &s->save));
	RSCHECK(dup_str(url, &s->url));
	RSCHECK(dup_str(token, &s->token));
	if (!json_is_array(sched) || json_array_size(sched) > RS_STATE_MAX_SCHEDULE)
		return bad(err, name, "job.schedule", "must be an array of at most 64 [step, workers] pairs");
	json_array_foreach(sched, i, e) {
		json_int_t st, w;
		if (json_unpack_ex(e, &jerr, JSON_STRICT, "[I, I]", &st, &w) != 0 || st < 1 || w < 1 ||
		    w > RS_STATE_MAX_MEMBERS || (i && st <= s->sched_step[i - 1]))
			return bad(err, name, "job.schedule", "entries must be [step, workers] with increasing steps");
		s->sched_step[i] = st;
		s->sched_workers[i] = (int32_t)w;
		s->nsched = (int)i + 1;
	}
	if (!json_is_array(workers) || json_array_size(workers) > RS_STATE_MAX_MEMBERS)
		return bad(err, name, "job.workers", "must be an array of {name, pid}");
	if (!(s->workers = calloc(json_array_size(workers) + 1, sizeof(*s->workers))))
		return RS_ENOMEM;
	json_array_foreach(workers, i, e) {
		const char *wn;
		json_int_t pid;
		if (json_unpack_ex(e, &jerr, JSON_STRICT, "{s:s, s:I}", "name", &wn, "pid", &pid) != 0 || !*wn ||
		    strlen(wn) > MAX_NAME || strspn(wn, NAME_CHARS) != strlen(wn) || pid < 1 || pid > INT32_MAX)
			return bad(err, name, "job.workers", "entries must be {name: 1..63 bytes, pid: > 0}");
		RSCHECK(dup_str(wn, &s->workers[i].name));
		s->workers[i].pid = pid;
		s->nworkers = (int)i + 1;
	}
	if (s->next_schedule > s->nsched)
		return bad(err, name, "next_schedule", "points past the schedule");
	return RS_OK;
}

rs_status rs_state_parse(const char *buf, size_t len, const char *name, rs_state *s, rs_err *err)
{
	json_error_t jerr;
	json_t *root, *plan, *world, *attempt, *job, *incs = NULL;
	const char *format, *phase, *error = NULL, *model = NULL;
	json_int_t version, gen, step, bound, term = 0, last = 0, reached = 0;
	int attempts, next;
	rs_status st = RS_EINVAL;

	memset(s, 0, sizeof(*s));
	if (len > RS_STATE_MAX_BYTES)
		return rs_err_set(err, RS_EINVAL, "%s: larger than %zu bytes", name, RS_STATE_MAX_BYTES);
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return rs_err_set(err, RS_EINVAL, "%s: line %d: %s", name, jerr.line, jerr.text);
	if (json_unpack_ex(root, &jerr, JSON_STRICT,
			   "{s:s, s:I, s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:i, s:i, s:o, s?o, s?s, s?I, s?I, s?I, s?s}",
			   "format", &format, "version", &version, "phase", &phase, "generation", &gen, "step", &step, "bound",
			   &bound, "plan", &plan, "world", &world, "attempt", &attempt, "attempts", &attempts,
			   "next_schedule", &next, "job", &job, "incarnations", &incs, "error", &error, "term", &term,
			   "last_generation", &last, "reached", &reached, "model", &model) != 0) {
		rs_err_set(err, RS_EINVAL, "%s: %s", name, jerr.text);
		goto out;
	}
	if (strcmp(format, FORMAT) != 0 || version < 1 || version > VERSION) {
		st = rs_err_set(err, RS_EINVAL, "%s: not a version 1..%d rowshift coordinator state", name, VERSION);
		goto out;
	}
	s->phase = (rs_state_phase)-1;
	for (unsigned p = 0; p < sizeof(phase_names) / sizeof(phase_names[0]); p++)
		if (!strcmp(phase, phase_names[p]))
			s->phase = (rs_state_phase)p;
	if ((int)s->phase < 0) {
		st = bad(err, name, "phase", "must be training, migrating, committing, done or failed");
		goto out;
	}
	if ((s->phase == RS_STATE_FAILED) != (error != NULL)) {
		st = bad(err, name, "error", "goes with the failed phase, which needs it");
		goto out;
	}
	if (error && !(s->error = strdup(error))) {
		st = RS_ENOMEM;
		goto out;
	}
	if (gen < 1 || step < 0 || bound < step || attempts < 0 || next < 0) {
		st = bad(err, name, "generation", "generation >= 1, 0 <= step <= bound");
		goto out;
	}
	if (term < 0 || term > INT64_MAX / 4) {
		st = bad(err, name, "term", "must be 0 or more");
		goto out;
	}
	if (last && (last <= gen || last > INT64_MAX / 4)) {
		st = bad(err, name, "last_generation", "must be past the generation");
		goto out;
	}
	if (reached < 0 || reached > INT64_MAX / 4) {
		st = bad(err, name, "reached", "must be 0 or more");
		goto out;
	}
	if (model && !rs_config_digest_ok(model)) {
		st = bad(err, name, "model", "must be a model config digest (6 groups of 8 hex digits joined by '-')");
		goto out;
	}
	if (model && !(s->model = strdup(model))) {
		st = RS_ENOMEM;
		goto out;
	}
	s->term = term;
	s->reached = reached;
	s->last_generation = last;
	s->generation = gen, s->step = step, s->bound = bound, s->attempts = attempts, s->next_schedule = next;
	RSCHECKGOTO(get_plan(plan, name, "plan", &s->plan, err), st, out);
	RSCHECKGOTO(get_names(world, RS_STATE_MAX_MEMBERS, name, "world", &s->world, &s->nworld, err), st, out);
	int migrating = s->phase == RS_STATE_MIGRATING || s->phase == RS_STATE_COMMITTING;
	if (migrating != !json_is_null(attempt)) {
		st = bad(err, name, "attempt", "an attempt goes with the migrating and committing phases only");
		goto out;
	}
	if (migrating)
		RSCHECKGOTO(parse_attempt(attempt, name, s, err), st, out);
	RSCHECKGOTO(parse_job(job, name, s, err), st, out);
	if (incs)
		RSCHECKGOTO(parse_incarnations(incs, name, s, err), st, out);
	if (s->bound > s->steps) {
		st = bad(err, name, "bound", "is past the job's steps");
		goto out;
	}
	st = RS_OK;
out:
	json_decref(root);
	if (st != RS_OK) {
		if (st == RS_ENOMEM)
			rs_err_set(err, st, "%s: out of memory", name);
		rs_state_free(s);
	}
	return st;
}

rs_status rs_state_read(const char *path, rs_state *s, rs_err *err)
{
	char *buf;
	size_t len;
	memset(s, 0, sizeof(*s));
	RSCHECK(rs_file_read(path, RS_STATE_MAX_BYTES, &buf, &len, err));
	rs_status st = rs_state_parse(buf, len, path, s, err);
	free(buf);
	return st;
}

rs_status rs_state_local_resume(const rs_state *s, const char *path, const char *config, int64_t steps, int *done,
				rs_err *err)
{
	*done = 0;
	if (config && strcmp(config, s->config) != 0)
		return rs_err_set(err, RS_EINVAL, "--config %s, but %s resumes a job of %s", config, path, s->config);
	if (!s->token) /* a Kubernetes state (its token is in a Secret) */
		return rs_err_set(err, RS_EINVAL, "%s has no join token: not a local job's state", path);
	if (s->phase != RS_STATE_DONE)
		return RS_OK;
	if (steps >= 0 && steps != s->steps)
		return rs_err_set(err, RS_EINVAL, "--steps %lld, but the job of %s is done, its %lld steps trained (remove the "
				  "file to train afresh)", (long long)steps, path, (long long)s->steps);
	*done = 1;
	rs_err_set(err, RS_OK, "the job of %s is done (%lld steps): nothing to train (remove the file to start afresh)", path,
		   (long long)s->steps);
	return RS_OK;
}

void rs_state_free(rs_state *s)
{
	json_decref(s->plan);
	json_decref(s->attempt_plan);
	for (int32_t i = 0; s->world && i < s->nworld; i++)
		free(s->world[i]);
	for (int32_t i = 0; s->uni && i < s->nuni; i++)
		free(s->uni[i]);
	for (int i = 0; s->workers && i < s->nworkers; i++)
		free(s->workers[i].name);
	free(s->world);
	free(s->uni);
	free(s->union_of_old);
	free(s->before);
	free(s->restore);
	free(s->error);
	free(s->model);
	free(s->config);
	free(s->save);
	free(s->url);
	free(s->token);
	free(s->ckpt_dir);
	free(s->workers);
	for (int i = 0; i < s->ninc; i++) {
		free(s->inc_names[i]);
		free(s->inc_values[i]);
	}
	free(s->inc_names);
	free(s->inc_values);
	memset(s, 0, sizeof(*s));
}
