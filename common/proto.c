/*
 * proto.c - see proto.h.
 */
#include "common/proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE_DEPTH 64

rs_status rs_proto_parse(const char *text, size_t len, json_t **out, const char **type, rs_err *err)
{
	json_error_t jerr;
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	*out = NULL;
	if (!j)
		return rs_err_set(err, RS_EINVAL, "malformed JSON: %s", jerr.text);
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

rs_status rs_proto_idle(json_t *msg, const char **addr, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s}", "type", &type, "addr", addr) != 0)
		return rs_err_set(err, RS_EINVAL, "idle: %s", jerr.text);
	return RS_OK;
}

rs_status rs_proto_migrating(json_t *msg, int64_t *generation, json_t **sent, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:o}", "type", &type, "generation", &gen, "sent", sent) != 0)
		return rs_err_set(err, RS_EINVAL, "migrating: %s", jerr.text);
	if (gen < 1 || !json_is_array(*sent) || json_array_size(*sent) > 65536)
		return rs_err_set(err, RS_EINVAL, "migrating: a bad generation or \"sent\"");
	for (size_t i = 0; i < json_array_size(*sent); i++) {
		json_int_t u, b;
		if (json_unpack_ex(json_array_get(*sent, i), &jerr, JSON_STRICT, "[I, I]", &u, &b) != 0 || u < 0 || u > 65535 ||
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
	type = json_string_value(json_object_get(msg, "type"));
	if (!type || strcmp(type, "join") != 0)
		return rs_err_set(err, RS_EINVAL, "the first message must be a join, not '%s'", type ? type : "?");
	m->incarnation = "";
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s, s:s, s:s, s:I, s?s}", "type", &type, "token", &m->token,
			   "worker", &m->worker, "addr", &m->addr, "pid", &pid, "incarnation", &m->incarnation) != 0)
		return rs_err_set(err, RS_EINVAL, "join: %s", jerr.text);
	if (!m->worker[0] || strlen(m->worker) > 63)
		return rs_err_set(err, RS_EINVAL, "join: worker name must be 1..63 bytes");
	if (strlen(m->incarnation) > 64)
		return rs_err_set(err, RS_EINVAL, "join: incarnation longer than 64 bytes");
	m->pid = pid;
	return RS_OK;
}

rs_status rs_proto_start(json_t *msg, rs_msg_start *s, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t v[8] = {0};
	int last = 1;
	s->save = NULL;
	s->load = NULL;
	s->previous_plan = NULL;
	s->union_of_old = NULL;
	v[7] = -1;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT,
			   "{s:s, s:I, s:I, s:I, s:o, s:o, s:I, s:I, s:I, s:I, s?s, s?s, s?I, s?o, s?o, s?b}", "type", &type,
			   "generation", &v[0], "rank", &v[1], "world", &v[2], "peers", &s->peers, "plan", &s->plan,
			   "first_step", &v[3], "steps", &v[4], "eval_every", &v[5], "eval_samples", &v[6], "save",
			   &s->save, "load", &s->load, "union_world", &v[7], "previous_plan", &s->previous_plan, "union_of_old",
			   &s->union_of_old, "last", &last) != 0)
		return rs_err_set(err, RS_EINVAL, "start: %s", jerr.text);
	s->generation = v[0], s->rank = v[1], s->world = v[2], s->first_step = v[3], s->steps = v[4];
	s->eval_every = v[5], s->eval_samples = v[6], s->union_world = v[7] < 0 ? v[2] : v[7];
	s->last = last;
	if (s->generation < 1 || s->world < 1 || s->world > 65536 || s->union_world < s->world ||
	    s->union_world > 65536 || s->rank < 0 || s->rank >= s->union_world || !json_is_array(s->peers) ||
	    (int64_t)json_array_size(s->peers) != s->union_world || s->eval_every < 0 || s->eval_samples < 0 ||
	    s->first_step < 0 || s->steps < s->first_step || !json_is_object(s->plan) ||
	    (s->previous_plan && !json_is_object(s->previous_plan)) || (!s->previous_plan) != (!s->union_of_old) ||
	    (!s->previous_plan && s->union_world != s->world) || (s->load && s->previous_plan))
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
			if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= s->union_world)
				return rs_err_set(err, RS_EINVAL, "start: union_of_old[%zu] is not a union rank", i);
			for (size_t k = 0; k < i; k++)
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
	json_int_t rank, gen, step;
	p->checksum = NULL;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I, s:s, s?o}", "type", &type, "rank", &rank,
			   "generation", &gen, "step", &step, "addr", &p->addr, "checksum", &p->checksum) != 0)
		return rs_err_set(err, RS_EINVAL, "paused: %s", jerr.text);
	if (rank < 0 || step < 0 || gen < 1 || (p->checksum && !json_is_array(p->checksum)))
		return rs_err_set(err, RS_EINVAL, "paused: a negative rank or step, or a bad checksum");
	p->rank = rank;
	p->generation = gen;
	p->step = step;
	return RS_OK;
}

rs_status rs_proto_staged(json_t *msg, rs_msg_staged *s, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t gen, b[4] = {0};
	int ok;
	memset(s, 0, sizeof(*s));
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:b, s?s, s?o, s?I, s?I, s?I, s?I, s?F, s?F, s?F}", "type",
			   &type, "generation", &gen, "ok", &ok, "reason", &s->reason, "checksum", &s->checksum,
			   "sent_bytes", &b[0], "recv_bytes", &b[1], "wire_bytes", &b[2], "kept_bytes", &b[3], "connect_s",
			   &s->connect_s, "copy_s", &s->copy_s, "move_s", &s->move_s) != 0)
		return rs_err_set(err, RS_EINVAL, "staged: %s", jerr.text);
	if (gen < 1 || b[0] < 0 || b[1] < 0 || b[2] < 0 || b[3] < 0 || (s->checksum && !json_is_array(s->checksum)) ||
	    !(s->connect_s >= 0) || !(s->copy_s >= 0) || !(s->move_s >= 0))
		return rs_err_set(err, RS_EINVAL, "staged: a bad generation, byte count, time or checksum");
	s->generation = gen;
	s->ok = ok;
	s->sent_bytes = b[0], s->recv_bytes = b[1], s->wire_bytes = b[2], s->kept_bytes = b[3];
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
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I}", "type", &type, "generation", &gen, "step", &st);
	else if (!strcmp(type, "abort"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s?s}", "type", &type, "generation", &gen, "reason",
				    &why);
	else if (!strcmp(type, "commit") || !strcmp(type, "committed") || !strcmp(type, "staging"))
		rc = json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &type, "generation", &gen);
	else
		return rs_err_set(err, RS_EINVAL, "'%s' does not carry a generation", type);
	if (rc != 0)
		return rs_err_set(err, RS_EINVAL, "%s: %s", type, jerr.text);
	if ((strcmp(type, "leave") != 0 && gen < 1) || (!strcmp(type, "training") && st < 0))
		return rs_err_set(err, RS_EINVAL, "%s: a bad generation or step", type);
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
