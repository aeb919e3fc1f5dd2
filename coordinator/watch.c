/*
 * watch.c - see watch.h.
 */
#include "coordinator/watch.h"
#include "common/grow.h"

#include <stdlib.h>
#include <string.h>

void rs_watch_reset(rs_watch_parser *p)
{
	p->len = 0;
	p->events = 0;
}

void rs_watch_free(rs_watch_parser *p)
{
	free(p->buf);
	memset(p, 0, sizeof(*p));
}

size_t rs_watch_pending(const rs_watch_parser *p) { return p->len; }

static const char *const type_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};

/* One complete line: an event, checked, handed to fn. */
static rs_status handle_line(rs_watch_parser *p, const char *line, size_t n, rs_watch_fn fn, void *ctx, rs_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(line, n, JSON_REJECT_DUPLICATES, &jerr);
	const char *type = json_string_value(json_object_get(root, "type"));
	json_t *object = json_object_get(root, "object");
	rs_watch_event ev = {.name = "", .resource_version = "", .message = ""};
	rs_status st = RS_OK;
	int t = -1;
	if (!root) {
		st = rs_err_set(err, RS_ECORRUPT, "watch: event %llu: malformed JSON: %s", p->events + 1, jerr.text);
		goto out;
	}
	for (int k = 0; type && k < 5; k++)
		if (!strcmp(type, type_names[k]))
			t = k;
	if (!json_is_object(root) || t < 0 || !json_is_object(object)) {
		st = rs_err_set(err, RS_ECORRUPT, "watch: event %llu: not {\"type\": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "
				"\"object\": {...}}", p->events + 1);
		goto out;
	}
	ev.type = (rs_watch_type)t;
	ev.object = object;
	if (ev.type == RS_WATCH_ERROR) {
		json_t *code = json_object_get(object, "code");
		const char *msg = json_string_value(json_object_get(object, "message"));
		if (!json_is_integer(code) || json_integer_value(code) < 100 || json_integer_value(code) > 599) {
			st = rs_err_set(err, RS_ECORRUPT, "watch: event %llu: an ERROR without a Status code", p->events + 1);
			goto out;
		}
		ev.code = (int)json_integer_value(code);
		ev.message = msg ? msg : "";
	} else {
		json_t *md = json_object_get(object, "metadata");
		const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
		const char *name = json_string_value(json_object_get(md, "name"));
		if (!rv || (ev.type != RS_WATCH_BOOKMARK && (!name || !*name))) {
			st = rs_err_set(err, RS_ECORRUPT, "watch: event %llu (%s): no metadata.%s", p->events + 1, type,
					rv ? "name" : "resourceVersion");
			goto out;
		}
		ev.resource_version = rv;
		ev.name = name ? name : "";
	}
	p->events++;
	fn(ctx, &ev);
out:
	json_decref(root);
	return st;
}

rs_status rs_watch_feed(rs_watch_parser *p, const char *data, size_t n, rs_watch_fn fn, void *ctx, rs_err *err)
{
	size_t max = p->max_line ? p->max_line : RS_WATCH_MAX_LINE;
	while (n) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;
		if (p->len + take > max)
			return rs_err_set(err, RS_ECORRUPT, "watch: event %llu: longer than %zu bytes", p->events + 1, max);
		const char *line = data;
		size_t len = take;
		if (p->len || !nl) {
			/* part of a line is held back: gather it */
			if (rs_grow(&p->buf, &p->cap, p->len + take + 1, 1) != RS_OK)
				return rs_err_set(err, RS_ENOMEM, "watch: out of memory");
			memcpy(p->buf + p->len, data, take);
			p->len += take;
			line = p->buf;
			len = p->len;
		}
		if (!nl)
			return RS_OK;
		data += take + 1;
		n -= take + 1;
		p->len = 0;
		while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
			len--;
		if (len)
			RSCHECK(handle_line(p, line, len, fn, ctx, err));
	}
	return RS_OK;
}
