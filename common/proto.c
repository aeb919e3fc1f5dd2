/*
 * proto.c - see proto.h.
 */
#include "common/proto.h"

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

rs_status rs_proto_join(json_t *msg, rs_msg_join *m, rs_err *err)
{
	json_error_t jerr;
	const char *type;
	json_int_t pid;
	type = json_string_value(json_object_get(msg, "type"));
	if (!type || strcmp(type, "join") != 0)
		return rs_err_set(err, RS_EINVAL, "the first message must be a join, not '%s'", type ? type : "?");
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:s, s:s, s:s, s:I}", "type", &type, "token", &m->token,
			   "worker", &m->worker, "addr", &m->addr, "pid", &pid) != 0)
		return rs_err_set(err, RS_EINVAL, "join: %s", jerr.text);
	if (!m->worker[0] || strlen(m->worker) > 63)
		return rs_err_set(err, RS_EINVAL, "join: worker name must be 1..63 bytes");
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
	s->previous_plan = NULL;
	v[7] = -1;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:I, s:o, s:o, s:I, s:I, s:I, s:I, s?s, s?I, s?o, s?b}",
			   "type", &type, "generation", &v[0], "rank", &v[1], "world", &v[2], "peers", &s->peers, "plan",
			   &s->plan, "first_step", &v[3], "steps", &v[4], "eval_every", &v[5], "eval_samples", &v[6],
			   "save", &s->save, "union_world", &v[7], "previous_plan", &s->previous_plan, "last", &last) != 0)
		return rs_err_set(err, RS_EINVAL, "start: %s", jerr.text);
	s->generation = v[0], s->rank = v[1], s->world = v[2], s->first_step = v[3], s->steps = v[4];
	s->eval_every = v[5], s->eval_samples = v[6], s->union_world = v[7] < 0 ? v[2] : v[7];
	s->last = last;
	if (s->world < 1 || s->world > 65536 || s->union_world < s->world || s->union_world > 65536 || s->rank < 0 ||
	    s->rank >= s->union_world || !json_is_array(s->peers) ||
	    (int64_t)json_array_size(s->peers) != s->union_world || s->eval_every < 0 || s->eval_samples < 0 ||
	    s->first_step < 0 || s->steps < s->first_step || !json_is_object(s->plan) ||
	    (s->previous_plan && !json_is_object(s->previous_plan)))
		return rs_err_set(err, RS_EINVAL, "start: inconsistent fields (rank %lld of %lld)", (long long)s->rank,
				  (long long)s->world);
	for (size_t i = 0; i < json_array_size(s->peers); i++)
		if (!json_is_string(json_array_get(s->peers, i)))
			return rs_err_set(err, RS_EINVAL, "start: peers[%zu] is not an address", i);
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
	json_int_t rank, step;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:s}", "type", &type, "rank", &rank, "step", &step,
			   "addr", &p->addr) != 0)
		return rs_err_set(err, RS_EINVAL, "paused: %s", jerr.text);
	if (rank < 0 || step < 0)
		return rs_err_set(err, RS_EINVAL, "paused: negative rank or step");
	p->rank = rank;
	p->step = step;
	return RS_OK;
}
