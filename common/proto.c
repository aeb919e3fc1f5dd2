/*
 * proto.c - see proto.h.
 */
#include "common/proto.h"
#include "common/config.h"
#include "common/auth.h"
#include "common/zjson.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

static const char *const type_names[RS_MSG_TYPE_COUNT] = {
	[RS_MSG_UNKNOWN] = "(unknown)", [RS_MSG_JOIN] = "join",         [RS_MSG_STAGING] = "staging",
	[RS_MSG_STAGED] = "staged",     [RS_MSG_MIGRATING] = "migrating", [RS_MSG_COMMITTED] = "committed",
	[RS_MSG_PAUSED] = "paused",     [RS_MSG_TRAINING] = "training", [RS_MSG_PROGRESS] = "progress",
	[RS_MSG_DONE] = "done",         [RS_MSG_IDLE] = "idle",         [RS_MSG_LEAVE] = "leave",
	[RS_MSG_SCALE] = "scale",       [RS_MSG_WELCOME] = "welcome",   [RS_MSG_REFUSED] = "refused",
	[RS_MSG_START] = "start",       [RS_MSG_COMMIT] = "commit",     [RS_MSG_ABORT] = "abort",
	[RS_MSG_RESUME] = "resume",     [RS_MSG_PAUSE] = "pause",       [RS_MSG_STOP] = "stop",
	[RS_MSG_SCALING] = "scaling",   [RS_MSG_ERROR] = "error",       [RS_MSG_CHALLENGE] = "challenge",
	[RS_MSG_CHECKPOINTED] = "checkpointed", [RS_MSG_PRECOPIED] = "precopied", [RS_MSG_FINISH] = "finish",
	[RS_MSG_CATCH_UP] = "catch_up",
};

/*
 * What a peer wrote, fit to quote in an error (its own keys and values end
 * up in jansson's messages): printable ASCII only, anything else as '?', at
 * most 60 characters. Returns out.
 */
static const char *tame(const char *in, char out[64])
{
	size_t o = 0;
	for (; *in && o < 60; in++)
		out[o++] = *in >= 0x20 && *in < 0x7f ? *in : '?';
	if (*in)
		out[o - 1] = out[o - 2] = out[o - 3] = '.';
	out[o] = 0;
	return out;
}

const char *rs_proto_type_name(rs_msg_type t)
{
	return (unsigned)t < RS_MSG_TYPE_COUNT ? type_names[t] : type_names[RS_MSG_UNKNOWN];
}

rs_msg_type rs_proto_kind(const json_t *msg)
{
	const char *t = json_string_value(json_object_get(msg, "type"));
	for (int k = 1; t && k < RS_MSG_TYPE_COUNT; k++)
		if (!strcmp(t, type_names[k]))
			return (rs_msg_type)k;
	return RS_MSG_UNKNOWN;
}

rs_status rs_proto_parse(const char *text, size_t len, json_t **out, const char **type, rs_err *err)
{
	json_error_t jerr;
	char q[64];
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	*out = NULL;
	if (!j)
		return rs_err_set(err, RS_EINVAL, "malformed JSON: %s", tame(jerr.text, q));
	if (!json_is_object(j) || !json_is_string(json_object_get(j, "type"))) {
		json_decref(j);
		return rs_err_set(err, RS_EINVAL, "a message must be an object with a string \"type\"");
	}
	*type = json_string_value(json_object_get(j, "type"));
	*out = j;
	return RS_OK;
}

const char *rs_proto_type(const json_t *msg)
{
	const char *t = json_string_value(json_object_get(msg, "type"));
	return t ? t : "(untyped)";
}

/* Whether a worker's announced address is a host:port (or [v6%zone]:port), as other workers will be given it. */
static int is_addr(const char *a)
{
	size_t n = strlen(a);
	const char *port = strrchr(a, ':');
	if (n > 255 || strspn(a, NAME_CHARS ":[]%") != n || !port || port == a || strchr(port, ']'))
		return 0;
	size_t digits = strlen(port + 1);
	return digits >= 1 && digits <= 5 && strspn(port + 1, "0123456789") == digits;
}

rs_status rs_proto_idle(json_t *msg, const char **addr, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s}", "type", &type, "addr", addr) != 0)
		return rs_err_set(err, RS_EINVAL, "idle: %s", jerr.text);
	if (!is_addr(*addr))
		return rs_err_set(err, RS_EINVAL, "idle: addr must be a host:port");
	return RS_OK;
}

rs_status rs_proto_migrating(json_t *msg, int64_t *generation, json_t **sent, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:o}", "type", &type, "generation", &gen, "sent", sent) != 0)
		return rs_err_set(err, RS_EINVAL, "migrating: %s", jerr.text);
	if (gen < 1 || !json_is_array(*sent) || json_array_size(*sent) > RS_MAX_WORKERS)
		return rs_err_set(err, RS_EINVAL, "migrating: a bad generation or \"sent\"");
	for (size_t i = 0; i < json_array_size(*sent); i++) {
		json_int_t u, b;
		if (json_unpack_ex(json_array_get(*sent, i), &jerr, JSON_STRICT, "[I, I]", &u, &b) != 0 || u < 0 || u >= RS_MAX_WORKERS ||
		    b < 0)
			return rs_err_set(err, RS_EINVAL, "migrating: sent[%zu] is not [union rank, bytes]", i);
	}
	*generation = gen;
	return RS_OK;
}

rs_status rs_proto_join(json_t *msg, rs_msg_join *m, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t pid;
	char q[64];
	type = json_string_value(json_object_get(msg, "type"));
	if (!type || strcmp(type, "join") != 0)
		return rs_err_set(err, RS_EINVAL, "the first message must be a join");
	json_int_t protocol = 0;
	m->incarnation = m->model = "";
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s, s:s, s:I, s?s, s?s, s?I, s:s, s:s}", "type", &type,
			   "worker", &m->worker, "addr", &m->addr, "pid", &pid, "incarnation", &m->incarnation, "model",
			   &m->model, "protocol", &protocol, "nonce", &m->nonce, "proof", &m->proof) != 0)
		return rs_err_set(err, RS_EINVAL, "join: %s", tame(jerr.text, q));
	if (m->model[0] && !rs_config_digest_ok(m->model))
		return rs_err_set(err, RS_EINVAL, "join: model must be a model config's digest");
	if (protocol < 0 || protocol > INT32_MAX)
		return rs_err_set(err, RS_EINVAL, "join: protocol must be a version number");
	if (!rs_auth_nonce_ok(m->nonce) || strlen(m->proof) != RS_AUTH_PROOF_HEX)
		return rs_err_set(err, RS_EINVAL, "join: a malformed nonce or proof");
	/* names reach logs, metrics and the status stream: letters, digits, '.', '_', '-' only */
	size_t wl = strlen(m->worker);
	if (wl < 1 || wl > 63 || strspn(m->worker, NAME_CHARS) != wl)
		return rs_err_set(err, RS_EINVAL, "join: worker name must be 1..63 letters, digits, '.', '_' or '-'");
	if (strlen(m->incarnation) > 64 || strspn(m->incarnation, NAME_CHARS) != strlen(m->incarnation))
		return rs_err_set(err, RS_EINVAL, "join: incarnation must be at most 64 letters or digits");
	if (m->addr[0] && !is_addr(m->addr)) /* a tool's join (rowshiftctl) announces none */
		return rs_err_set(err, RS_EINVAL, "join: addr must be a host:port");
	m->pid = pid;
	m->protocol = protocol;
	return RS_OK;
}

/*
 * A start message's plan field `key` as sent (a zjson string: every member
 * gets the same plan, deflated once), or a plan object: *plan the object,
 * put in msg in place of the string, so it lives as long as msg.
 */
static rs_status wire_plan(json_t *msg, const char *key, json_t **plan, rs_err *err)
{
	if (!json_is_string(*plan))
		return RS_OK; /* an object, or wrong and refused with the other fields */
	char where[64];
	snprintf(where, sizeof(where), "start: %s", key);
	RSCHECK(rs_zjson_object(*plan, (size_t)1 << 30, where, plan, err));
	if (json_object_set_new(msg, key, *plan) != 0)
		return rs_err_set(err, RS_ENOMEM, "start: out of memory");
	return RS_OK;
}

rs_status rs_proto_start(json_t *msg, rs_msg_start *s, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t v[10] = {0};
	int last = 1, precopy = 0;
	s->save = NULL;
	s->load = NULL;
	s->restore = NULL;
	s->checkpoint_dir = NULL;
	s->previous_plan = NULL;
	s->union_of_old = NULL;
	v[7] = -1;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT,
			   "{s:s, s:I, s:I, s:I, s:o, s:o, s:I, s:I, s:I, s:I, s?s, s?s, s?s, s?I, s?o, s?o, s?b, s?s, s?I, s?I, s?b}",
			   "type", &type,
			   "generation", &v[0], "rank", &v[1], "world", &v[2], "peers", &s->peers, "plan", &s->plan,
			   "first_step", &v[3], "steps", &v[4], "eval_every", &v[5], "eval_samples", &v[6], "save",
			   &s->save, "load", &s->load, "restore", &s->restore, "union_world", &v[7], "previous_plan", &s->previous_plan, "union_of_old",
			   &s->union_of_old, "last", &last, "checkpoint_dir", &s->checkpoint_dir, "checkpoint_every", &v[8],
			   "checkpoint_interval", &v[9], "precopy", &precopy) != 0)
		return rs_err_set(err, RS_EINVAL, "start: %s", jerr.text);
	RSCHECK(wire_plan(msg, "plan", &s->plan, err));
	if (s->previous_plan)
		RSCHECK(wire_plan(msg, "previous_plan", &s->previous_plan, err));
	s->precopy = precopy;
	s->generation = v[0], s->rank = v[1], s->world = v[2], s->first_step = v[3], s->steps = v[4];
	s->eval_every = v[5], s->eval_samples = v[6], s->union_world = v[7] < 0 ? v[2] : v[7];
	s->last = last;
	s->checkpoint_every = v[8], s->checkpoint_interval = v[9];
	if (s->checkpoint_every < 0 || s->checkpoint_interval < 0 ||
	    (s->checkpoint_every > 0 || s->checkpoint_interval > 0) != (s->checkpoint_dir != NULL))
		return rs_err_set(err, RS_EINVAL, "start: a checkpoint_dir needs checkpoint_every or checkpoint_interval "
						  "(>= 1), and they need it");
	if (s->generation < 1 || s->world < 1 || s->world > RS_MAX_WORKERS || s->union_world < s->world ||
	    s->union_world > RS_MAX_WORKERS || s->rank < 0 || s->rank >= s->union_world || !json_is_array(s->peers) ||
	    (int64_t)json_array_size(s->peers) != s->union_world || s->eval_every < 0 || s->eval_samples < 0 ||
	    s->first_step < 0 || s->steps < s->first_step || !json_is_object(s->plan) ||
	    (s->previous_plan && !json_is_object(s->previous_plan)) || (!s->previous_plan) != (!s->union_of_old) ||
	    (!s->previous_plan && s->union_world != s->world) || (s->load && s->previous_plan) ||
	    (s->restore && !s->previous_plan) || (s->precopy && (!s->previous_plan || s->restore)))
		return rs_err_set(err, RS_EINVAL, "start: inconsistent fields (rank %lld of %lld)", (long long)s->rank,
				  (long long)s->world);
	for (size_t i = 0; i < json_array_size(s->peers); i++)
		if (!json_is_string(json_array_get(s->peers, i)))
			return rs_err_set(err, RS_EINVAL, "start: peers[%zu] is not an address", i);
	if (s->union_of_old) {
		size_t n = json_array_size(s->union_of_old);
		if (!json_is_array(s->union_of_old) || n < 1 || n > (size_t)s->union_world)
			return rs_err_set(err, RS_EINVAL, "start: union_of_old must list 1..union_world ranks");
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_array_get(s->union_of_old, i);
			if (!json_is_integer(e) || json_integer_value(e) < -1 || json_integer_value(e) >= s->union_world)
				return rs_err_set(err, RS_EINVAL, "start: union_of_old[%zu] is not a union rank (or -1: lost)", i);
			for (size_t k = 0; k < i && json_integer_value(e) >= 0; k++)
				if (json_integer_value(json_array_get(s->union_of_old, k)) == json_integer_value(e))
					return rs_err_set(err, RS_EINVAL, "start: union_of_old[%zu] repeats union rank %lld",
							  i, (long long)json_integer_value(e));
		}
	}
	return RS_OK;
}

rs_status rs_proto_progress(json_t *msg, rs_msg_progress *p, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t rank, step;
	p->auc = -1;
	p->teacher_auc = -1;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:F, s:F, s?F, s?F}", "type", &type, "rank", &rank,
			   "step", &step, "loss", &p->loss, "samples_per_s", &p->samples_per_s, "auc", &p->auc,
			   "teacher_auc", &p->teacher_auc) != 0)
		return rs_err_set(err, RS_EINVAL, "progress: %s", jerr.text);
	if (rank < 0 || step < 0)
		return rs_err_set(err, RS_EINVAL, "progress: negative rank or step");
	p->rank = rank;
	p->step = step;
	return RS_OK;
}

rs_status rs_proto_paused(json_t *msg, rs_msg_paused *p, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t rank, gen, step, prepared = 0;
	p->checksum = p->held = NULL;
	p->stopped_s = 0;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I, s:s, s?o, s?o, s?I, s?F}", "type", &type,
			   "rank", &rank, "generation", &gen, "step", &step, "addr", &p->addr, "checksum", &p->checksum,
			   "held", &p->held, "prepared", &prepared, "stopped_s", &p->stopped_s) != 0)
		return rs_err_set(err, RS_EINVAL, "paused: %s", jerr.text);
	if (!(p->stopped_s >= 0 && p->stopped_s <= 3600))
		return rs_err_set(err, RS_EINVAL, "paused: stopped_s %g is not a time in [0, 3600] s", p->stopped_s);
	if (rank < 0 || step < 0 || gen < 1 || (p->checksum && !json_is_array(p->checksum)) ||
	    (p->held && !json_is_array(p->held)))
		return rs_err_set(err, RS_EINVAL, "paused: a negative rank or step, or a bad checksum");
	if (!is_addr(p->addr))
		return rs_err_set(err, RS_EINVAL, "paused: addr must be a host:port");
	if (prepared < 0 || (prepared > 0 && prepared - 1 != step))
		return rs_err_set(err, RS_EINVAL, "paused: prepared %lld is not the step after %lld", (long long)prepared,
				  (long long)step);
	p->prepared = prepared;
	p->rank = rank;
	p->generation = gen;
	p->step = step;
	return RS_OK;
}

rs_status rs_proto_staged(json_t *msg, rs_msg_staged *s, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen, b[8] = {0};
	int ok;
	memset(s, 0, sizeof(*s));
	if (json_unpack_ex(msg, &jerr, JSON_STRICT,
			   "{s:s, s:I, s:b, s?s, s?o, s?o, s?I, s?I, s?I, s?I, s?I, s?F, s?F, s?F, s?I, s?I, s?I}", "type",
			   &type, "generation", &gen, "ok", &ok, "reason", &s->reason, "checksum", &s->checksum, "restored",
			   &s->restored, "restored_rows", &b[4], "sent_bytes", &b[0], "recv_bytes", &b[1], "wire_bytes", &b[2],
			   "kept_bytes", &b[3], "connect_s", &s->connect_s, "copy_s", &s->copy_s, "move_s", &s->move_s,
			   "background_rounds", &b[5], "dirty_rows", &b[6], "dirty_bytes", &b[7]) != 0)
		return rs_err_set(err, RS_EINVAL, "staged: %s", jerr.text);
	if (gen < 1 || b[0] < 0 || b[1] < 0 || b[2] < 0 || b[3] < 0 || b[4] < 0 || b[5] < 0 || b[6] < 0 || b[7] < 0 ||
	    (s->checksum && !json_is_array(s->checksum)) || (s->restored && !json_is_array(s->restored)) ||
	    !(s->connect_s >= 0) || !(s->copy_s >= 0) || !(s->move_s >= 0))
		return rs_err_set(err, RS_EINVAL, "staged: a bad generation, byte count, time or checksum");
	s->generation = gen;
	s->ok = ok;
	s->sent_bytes = b[0], s->recv_bytes = b[1], s->wire_bytes = b[2], s->kept_bytes = b[3], s->restored_rows = b[4];
	s->background_rounds = b[5], s->dirty_rows = b[6], s->dirty_bytes = b[7];
	if (!ok && !s->reason)
		s->reason = "no reason given";
	return RS_OK;
}

rs_status rs_proto_resume(json_t *msg, rs_msg_resume *r, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen, steps;
	int last;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:b}", "type", &type, "generation", &gen, "steps",
			   &steps, "last", &last) != 0)
		return rs_err_set(err, RS_EINVAL, "resume: %s", jerr.text);
	if (gen < 1 || steps < 0)
		return rs_err_set(err, RS_EINVAL, "resume: a bad generation or step count");
	*r = (rs_msg_resume){gen, steps, last};
	return RS_OK;
}

rs_status rs_proto_generation(json_t *msg, int64_t *generation, int64_t *step, const char **reason, rs_err *err)
{
	json_error_t jerr;
	const char *type = json_string_value(json_object_get(msg, "type")), *why = NULL;
	json_int_t gen = 0, st = -1;
	int rc;
	if (!type)
		return rs_err_set(err, RS_EINVAL, "a message without a type");
	if (!strcmp(type, "leave"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s?s}", "type", &type, "reason", &why);
	else if (!strcmp(type, "training"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s?s}", "type", &type, "generation", &gen, "step",
				    &st, "addr", &why);
	else if (!strcmp(type, "catch_up"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I}", "type", &type, "generation", &gen, "step", &st);
	else if (!strcmp(type, "abort"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s?s}", "type", &type, "generation", &gen, "reason",
				    &why);
	else if (!strcmp(type, "commit") || !strcmp(type, "committed") || !strcmp(type, "staging") ||
		 !strcmp(type, "precopied"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &type, "generation", &gen);
	else
		return rs_err_set(err, RS_EINVAL, "'%s' does not carry a generation", type);
	if (rc != 0)
		return rs_err_set(err, RS_EINVAL, "%s: %s", type, jerr.text);
	if ((strcmp(type, "leave") != 0 && gen < 1) || ((!strcmp(type, "training") || !strcmp(type, "catch_up")) && st < 0))
		return rs_err_set(err, RS_EINVAL, "%s: a bad generation or step", type);
	if (!strcmp(type, "training") && why && !is_addr(why))
		return rs_err_set(err, RS_EINVAL, "training: addr must be a host:port");
	if (generation)
		*generation = gen;
	if (step)
		*step = st;
	if (reason)
		*reason = why;
	return RS_OK;
}

json_t *rs_proto_checksums_to_json(const uint64_t *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++) {
		char hex[17];
		snprintf(hex, sizeof(hex), "%016" PRIx64, v[i]);
		if (json_array_append_new(a, json_string(hex)) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

rs_status rs_proto_checksums(const json_t *arr, uint64_t *out, int n, rs_err *err)
{
	if (!json_is_array(arr) || json_array_size(arr) != (size_t)n)
		return rs_err_set(err, RS_EINVAL, "checksum: expected an array of %d", n);
	for (int i = 0; i < n; i++) {
		const char *h = json_string_value(json_array_get(arr, (size_t)i));
		char *end;
		if (!h || strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16)
			return rs_err_set(err, RS_EINVAL, "checksum[%d] is not 16 hex digits", i);
		out[i] = strtoull(h, &end, 16);
	}
	return RS_OK;
}

rs_status rs_proto_done(json_t *msg, int64_t *generation, int64_t *rank, int64_t *step, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t g = 0, r, st;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s?I, s:I, s:I}", "type", &type, "generation", &g, "rank", &r,
			   "step", &st) != 0)
		return rs_err_set(err, RS_EINVAL, "done: %s", jerr.text);
	if (g < 0 || r < 0 || st < 0)
		return rs_err_set(err, RS_EINVAL, "done: a negative generation, rank or step");
	*generation = g, *rank = r, *step = st;
	return RS_OK;
}

rs_status rs_proto_checkpointed(json_t *msg, rs_msg_checkpointed *m, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t g, r, s, d = -1;
	json_t *files;
	char q[64];
	m->files = NULL;
	m->nfiles = 0;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I, s:o, s?I}", "type", &type, "generation", &g,
			   "rank", &r, "step", &s, "files", &files, "dense_params", &d) != 0)
		return rs_err_set(err, RS_EINVAL, "checkpointed: %s", tame(jerr.text, q));
	size_t n = json_array_size(files);
	if (g < 1 || r < 0 || r >= RS_MAX_WORKERS || s < 1 || d < -1 || !json_is_array(files) ||
	    n > RS_PROTO_MAX_CKPT_FILES)
		return rs_err_set(err, RS_EINVAL, "checkpointed: inconsistent fields");
	m->files = calloc(n + 1, sizeof(*m->files));
	if (!m->files)
		return rs_err_set(err, RS_ENOMEM, "checkpointed: out of memory");
	for (size_t i = 0; i < n; i++) {
		json_int_t crc, bytes;
		const char *f;
		if (json_unpack_ex(json_array_get(files, i), &jerr, JSON_STRICT, "{s:s, s:I, s:I}", "file", &f, "crc32c", &crc,
				   "bytes", &bytes) != 0 ||
		    !f[0] || f[0] == '.' || strlen(f) > 255 || strspn(f, NAME_CHARS) != strlen(f) || crc < 0 ||
		    crc > (json_int_t)UINT32_MAX || bytes < 0) {
			free(m->files);
			m->files = NULL;
			return rs_err_set(err, RS_EINVAL, "checkpointed: files[%zu] is not {file (a plain name), crc32c, bytes}", i);
		}
		m->files[i] = (rs_ckpt_file_report){f, (uint32_t)crc, bytes};
	}
	m->generation = g, m->rank = r, m->step = s, m->dense_params = d, m->nfiles = (int)n;
	return RS_OK;
}

rs_status rs_proto_scale(json_t *msg, int32_t *workers, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t n;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &type, "workers", &n) != 0 || n < 1 ||
	    n > RS_MAX_WORKERS)
		return rs_err_set(err, RS_EINVAL, "scale needs \"workers\": 1..%d", RS_MAX_WORKERS);
	*workers = (int32_t)n;
	return RS_OK;
}

rs_status rs_proto_reply(json_t *msg, rs_msg_reply *m, rs_err *err)
{
	json_error_t jerr;
	const char *t;
	json_int_t id = 0, n = 0;
	char q[64];
	memset(m, 0, sizeof(*m));
	m->type = rs_proto_kind(msg);
	switch (m->type) {
	case RS_MSG_WELCOME:
		if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:s}", "type", &t, "worker_id", &id, "proof",
				   &m->proof) != 0)
			return rs_err_set(err, RS_EINVAL, "welcome: %s", tame(jerr.text, q));
		return RS_OK;
	case RS_MSG_REFUSED:
		if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s, s?s}", "type", &t, "reason", &m->reason, "proof",
				   &m->proof) != 0)
			return rs_err_set(err, RS_EINVAL, "refused: %s", tame(jerr.text, q));
		return RS_OK;
	case RS_MSG_ERROR:
		if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s}", "type", &t, "reason", &m->reason) != 0)
			return rs_err_set(err, RS_EINVAL, "error: %s", tame(jerr.text, q));
		return RS_OK;
	case RS_MSG_SCALING:
		if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &t, "workers", &n) != 0 || n < 1)
			return rs_err_set(err, RS_EINVAL, "scaling: %s", n < 1 ? "no worker count" : tame(jerr.text, q));
		m->workers = n;
		return RS_OK;
	default:
		return rs_err_set(err, RS_EINVAL, "'%s' is not an answer", tame(rs_proto_type(msg), q));
	}
}

rs_status rs_proto_challenge(json_t *msg, const char **nonce, const char **epoch, int64_t *term, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	char q[64];
	json_int_t t = 0;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s, s:s, s?I}", "type", &type, "nonce", nonce, "epoch", epoch,
			   "term", &t) != 0)
		return rs_err_set(err, RS_EINVAL, "challenge: %s", tame(jerr.text, q));
	if (strcmp(type, "challenge") != 0 || !rs_auth_nonce_ok(*nonce) || !rs_auth_nonce_ok(*epoch) || t < 0 ||
	    t > INT64_MAX / 2)
		return rs_err_set(err, RS_EINVAL, "challenge: a malformed nonce, epoch or term");
	*term = t;
	return RS_OK;
}

void rs_proto_bound_epoch(const char *epoch, int64_t term, char *out, size_t n)
{
	if (term)
		snprintf(out, n, "%s.%lld", epoch, (long long)term);
	else
		snprintf(out, n, "%s", epoch);
}

rs_status rs_proto_join_proof(const char *token, const char *challenge, const char *epoch, const rs_msg_join *m,
			      char *out)
{
	char pid[24], protocol[24];
	snprintf(pid, sizeof(pid), "%lld", (long long)m->pid);
	snprintf(protocol, sizeof(protocol), "%lld", (long long)m->protocol);
	/* the model last, and only when announced: a join without one is proven as before it existed (protocol 1) */
	const char *parts[] = {challenge, epoch, m->nonce, m->worker, m->addr, pid, m->incarnation ? m->incarnation : "",
			       protocol, m->model};
	return rs_auth_proof(token, "rowshift join", parts, m->model && m->model[0] ? 9 : 8, out);
}

rs_status rs_proto_answer_proof(const char *token, const char *challenge, const char *epoch, const rs_msg_join *m,
				const char *answer, char *out)
{
	const char *parts[] = {m->nonce, challenge, epoch, m->worker, answer};
	return rs_auth_proof(token, "rowshift answer", parts, 5, out);
}

/* ---- builders ------------------------------------------------------------------------ */

json_t *rs_proto_make_challenge(const char *nonce, const char *epoch, int64_t term)
{
	json_t *m = json_pack("{s:s, s:s, s:s}", "type", "challenge", "nonce", nonce, "epoch", epoch);
	if (m && term && json_object_set_new(m, "term", json_integer(term)) != 0)
		json_decref(m), m = NULL;
	return m;
}

json_t *rs_proto_make_join(const rs_msg_join *m)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s}", "type", "join", "worker", m->worker, "addr",
			      m->addr, "pid", (json_int_t)m->pid, "protocol", (json_int_t)m->protocol, "nonce", m->nonce,
			      "proof", m->proof);
	if (j && ((m->incarnation && m->incarnation[0] &&
		   json_object_set_new(j, "incarnation", json_string(m->incarnation)) != 0) ||
		  (m->model && m->model[0] && json_object_set_new(j, "model", json_string(m->model)) != 0))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

json_t *rs_proto_make_welcome(int64_t worker_id, const char *proof)
{
	return json_pack("{s:s, s:I, s:s}", "type", "welcome", "worker_id", (json_int_t)worker_id, "proof", proof);
}

json_t *rs_proto_make_refused(const char *reason, const char *proof)
{
	return json_pack("{s:s, s:s, s:s*}", "type", "refused", "reason", reason, "proof", proof);
}

/* With want: add key = v (a new reference, stolen) to j; NULL (j freed) when that fails. v is freed either way. */
static json_t *opt_set(json_t *j, const char *key, json_t *v, int want)
{
	if (!j || !want) {
		json_decref(v);
		return j;
	}
	if (!v || json_object_set_new(j, key, v) != 0) {
		json_decref(j);
		return NULL;
	}
	return j;
}

json_t *rs_proto_make_start(const rs_msg_start *m)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:O, s:O, s:I, s:I, s:I, s:I, s:b}", "type", "start",
			      "generation", (json_int_t)m->generation, "rank", (json_int_t)m->rank, "world",
			      (json_int_t)m->world, "union_world", (json_int_t)m->union_world, "peers", m->peers, "plan",
			      m->plan, "first_step", (json_int_t)m->first_step, "steps", (json_int_t)m->steps,
			      "eval_every", (json_int_t)m->eval_every, "eval_samples", (json_int_t)m->eval_samples, "last",
			      m->last);
	j = opt_set(j, "previous_plan", json_incref(m->previous_plan), m->previous_plan != NULL);
	j = opt_set(j, "union_of_old", json_incref(m->union_of_old), m->union_of_old != NULL);
	j = opt_set(j, "save", m->save ? json_string(m->save) : NULL, m->save != NULL);
	j = opt_set(j, "checkpoint_dir", m->checkpoint_dir ? json_string(m->checkpoint_dir) : NULL,
		    m->checkpoint_dir != NULL);
	j = opt_set(j, "checkpoint_every", json_integer(m->checkpoint_every), m->checkpoint_every > 0);
	j = opt_set(j, "checkpoint_interval", json_integer(m->checkpoint_interval), m->checkpoint_interval > 0);
	j = opt_set(j, "restore", m->restore ? json_string(m->restore) : NULL, m->restore != NULL);
	j = opt_set(j, "precopy", json_true(), m->precopy);
	return opt_set(j, "load", m->load ? json_string(m->load) : NULL, m->load != NULL);
}

json_t *rs_proto_make_paused(const rs_msg_paused *m)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:s}", "type", "paused", "rank", (json_int_t)m->rank, "generation",
			      (json_int_t)m->generation, "step", (json_int_t)m->step, "addr", m->addr);
	j = opt_set(j, "checksum", json_incref(m->checksum), m->checksum != NULL);
	j = opt_set(j, "prepared", json_integer(m->prepared), m->prepared > 0);
	j = opt_set(j, "stopped_s", json_real(m->stopped_s), m->stopped_s > 0);
	return opt_set(j, "held", json_incref(m->held), m->held != NULL);
}

json_t *rs_proto_make_staged(const rs_msg_staged *m)
{
	if (!m->ok)
		return json_pack("{s:s, s:I, s:b, s:s}", "type", "staged", "generation", (json_int_t)m->generation, "ok", 0,
				 "reason", m->reason ? m->reason : "no reason given");
	json_t *j = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "type", "staged", "generation",
			      (json_int_t)m->generation, "ok", 1, "sent_bytes", (json_int_t)m->sent_bytes, "recv_bytes",
			      (json_int_t)m->recv_bytes, "wire_bytes", (json_int_t)m->wire_bytes, "kept_bytes",
			      (json_int_t)m->kept_bytes, "connect_s", m->connect_s, "copy_s", m->copy_s, "move_s",
			      m->move_s);
	j = opt_set(j, "restored", json_incref(m->restored), m->restored != NULL);
	j = opt_set(j, "restored_rows", json_integer(m->restored_rows), m->restored_rows > 0);
	j = opt_set(j, "background_rounds", json_integer(m->background_rounds), m->background_rounds > 0);
	j = opt_set(j, "dirty_rows", json_integer(m->dirty_rows), m->dirty_rows > 0);
	j = opt_set(j, "dirty_bytes", json_integer(m->dirty_bytes), m->dirty_bytes > 0);
	return opt_set(j, "checksum", json_incref(m->checksum), m->checksum != NULL);
}

json_t *rs_proto_make_training(int64_t generation, int64_t step, const char *addr)
{
	json_t *j = rs_proto_make_generation(RS_MSG_TRAINING, generation, step, NULL);
	return opt_set(j, "addr", addr ? json_string(addr) : NULL, addr != NULL);
}

rs_status rs_proto_finish(json_t *msg, rs_msg_finish *f, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen, first, steps;
	int last;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I, s:b}", "type", &type, "generation", &gen,
			   "first_step", &first, "steps", &steps, "last", &last) != 0)
		return rs_err_set(err, RS_EINVAL, "finish: %s", jerr.text);
	if (gen < 1 || first < 0 || steps < first)
		return rs_err_set(err, RS_EINVAL, "finish: a bad generation or step");
	*f = (rs_msg_finish){gen, first, steps, last};
	return RS_OK;
}

json_t *rs_proto_make_finish(const rs_msg_finish *m)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:b}", "type", "finish", "generation", (json_int_t)m->generation,
			 "first_step", (json_int_t)m->first_step, "steps", (json_int_t)m->steps, "last", m->last);
}

json_t *rs_proto_make_resume(const rs_msg_resume *m)
{
	return json_pack("{s:s, s:I, s:I, s:b}", "type", "resume", "generation", (json_int_t)m->generation, "steps",
			 (json_int_t)m->steps, "last", m->last);
}

json_t *rs_proto_make_progress(const rs_msg_progress *m)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:f, s:f}", "type", "progress", "rank", (json_int_t)m->rank, "step",
			      (json_int_t)m->step, "loss", m->loss, "samples_per_s", m->samples_per_s);
	j = opt_set(j, "auc", json_real(m->auc), m->auc >= 0);
	return opt_set(j, "teacher_auc", json_real(m->teacher_auc), m->teacher_auc >= 0);
}

json_t *rs_proto_make_idle(const char *addr) { return json_pack("{s:s, s:s}", "type", "idle", "addr", addr); }

json_t *rs_proto_make_done(int64_t generation, int64_t rank, int64_t step)
{
	return json_pack("{s:s, s:I, s:I, s:I}", "type", "done", "generation", (json_int_t)generation, "rank",
			 (json_int_t)rank, "step", (json_int_t)step);
}

json_t *rs_proto_make_checkpointed(const rs_msg_checkpointed *m)
{
	json_t *files = json_array();
	for (int i = 0; files && i < m->nfiles; i++)
		if (json_array_append_new(files, json_pack("{s:s, s:I, s:I}", "file", m->files[i].file, "crc32c",
							   (json_int_t)m->files[i].crc32c, "bytes",
							   (json_int_t)m->files[i].bytes)) != 0) {
			json_decref(files);
			return NULL;
		}
	if (!files)
		return NULL;
	json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:o}", "type", "checkpointed", "generation", (json_int_t)m->generation,
			      "rank", (json_int_t)m->rank, "step", (json_int_t)m->step, "files", files);
	return opt_set(j, "dense_params", json_integer(m->dense_params), m->dense_params >= 0);
}

json_t *rs_proto_make_scale(int32_t workers)
{
	return json_pack("{s:s, s:i}", "type", "scale", "workers", (int)workers);
}

json_t *rs_proto_make_scaling(int32_t workers)
{
	return json_pack("{s:s, s:i}", "type", "scaling", "workers", (int)workers);
}

json_t *rs_proto_make_migrating(int64_t generation, json_t *sent)
{
	return json_pack("{s:s, s:I, s:O}", "type", "migrating", "generation", (json_int_t)generation, "sent", sent);
}

json_t *rs_proto_migrating_sent(const uint64_t *sent, const uint64_t *total, int32_t n)
{
	json_t *pairs = json_array();
	for (int32_t u = 0; pairs && u < n; u++)
		if (total[u] && json_array_append_new(pairs, json_pack("[i, I]", (int)u, (json_int_t)sent[u])) != 0) {
			json_decref(pairs);
			pairs = NULL;
		}
	return pairs;
}

json_t *rs_proto_make_generation(rs_msg_type type, int64_t generation, int64_t step, const char *reason)
{
	const char *name = rs_proto_type_name(type);
	switch (type) {
	case RS_MSG_COMMIT:
	case RS_MSG_COMMITTED:
	case RS_MSG_STAGING:
	case RS_MSG_PRECOPIED:
		return json_pack("{s:s, s:I}", "type", name, "generation", (json_int_t)generation);
	case RS_MSG_ABORT:
		return json_pack("{s:s, s:I, s:s}", "type", name, "generation", (json_int_t)generation, "reason",
				 reason ? reason : "no reason given");
	case RS_MSG_TRAINING:
	case RS_MSG_CATCH_UP:
		return json_pack("{s:s, s:I, s:I}", "type", name, "generation", (json_int_t)generation, "step",
				 (json_int_t)step);
	case RS_MSG_LEAVE:
		return reason ? json_pack("{s:s, s:s}", "type", name, "reason", reason) : json_pack("{s:s}", "type", name);
	default:
		RS_ASSERT(!"not a message of the generation family");
	}
}

json_t *rs_proto_make_plain(rs_msg_type type)
{
	RS_ASSERT(type == RS_MSG_PAUSE || type == RS_MSG_STOP);
	return json_pack("{s:s}", "type", rs_proto_type_name(type));
}

json_t *rs_proto_make_reason(rs_msg_type type, const char *reason)
{
	RS_ASSERT(type == RS_MSG_ERROR);
	return json_pack("{s:s, s:s}", "type", rs_proto_type_name(type), "reason", reason);
}
