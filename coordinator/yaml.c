/*
 * yaml.c - see yaml.h. Lines are first cut into (indentation, content,
 * line number) with comments removed; a recursive descent over them then
 * builds mappings, sequences and scalars.
 */
#include "coordinator/yaml.h"
#include "common/grow.h"

#include <stdlib.h>
#include <string.h>

typedef struct line {
	int indent;
	char *text;   /* content: indentation and comment removed, right-trimmed; owned */
	int no;       /* 1-based line number */
} line;

typedef struct parser {
	line *v;
	size_t n, cap;
	size_t i;     /* the next line */
	const char *name;
	rs_err *err;
} parser;

static rs_status bad(parser *p, int no, const char *what)
{
	return rs_err_set(p->err, RS_EINVAL, "%s:%d: %s", p->name, no, what);
}

/* Remove a comment: '#' at the start or after a space, outside quotes. */
static void strip_comment(char *s)
{
	char quote = 0;
	for (char *c = s; *c; c++) {
		if (quote) {
			if (*c == quote)
				quote = 0;
		} else if (*c == '\'' || *c == '"') {
			quote = *c;
		} else if (*c == '#' && (c == s || c[-1] == ' ')) {
			*c = 0;
			return;
		}
	}
}

static rs_status split_lines(parser *p, const char *text, size_t len)
{
	size_t at = 0;
	int no = 0;
	while (at < len) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
		no++;
		char *s = malloc(n + 1);
		if (!s)
			return rs_err_set(p->err, RS_ENOMEM, "%s: out of memory", p->name);
		memcpy(s, text + at, n);
		s[n] = 0;
		at += n + (nl ? 1 : 0);
		if (memchr(s, 0, n)) {
			free(s);
			return bad(p, no, "a NUL byte");
		}
		int indent = 0;
		while (s[indent] == ' ')
			indent++;
		if (s[indent] == '\t') {
			free(s);
			return bad(p, no, "a tab in the indentation (YAML indents with spaces)");
		}
		strip_comment(s);
		size_t e = strlen(s);
		while (e > (size_t)indent && (s[e - 1] == ' ' || s[e - 1] == '\r' || s[e - 1] == '\t'))
			s[--e] = 0;
		if (!s[indent] || (no == 1 && !strcmp(s + indent, "---")) || !strcmp(s + indent, "---")) {
			free(s);
			continue;
		}
		memmove(s, s + indent, strlen(s + indent) + 1);
		if (rs_grow(&p->v, &p->cap, p->n + 1, sizeof(*p->v)) != RS_OK) {
			free(s);
			return rs_err_set(p->err, RS_ENOMEM, "%s: out of memory", p->name);
		}
		p->v[p->n++] = (line){indent, s, no};
	}
	return RS_OK;
}

/* A scalar's text as a JSON value: quoted strings unquoted, true/false/null recognized. */
static rs_status scalar(parser *p, const char *s, int no, json_t **out)
{
	size_t n = strlen(s);
	*out = NULL;
	if (*s == '&' || *s == '*' || *s == '!' || *s == '|' || *s == '>' || *s == '%' || *s == '@' || *s == '`')
		return bad(p, no, "anchors, aliases, tags and block scalars are not supported");
	if (!strcmp(s, "{}")) {
		*out = json_object();
	} else if (!strcmp(s, "[]")) {
		*out = json_array();
	} else if (*s == '{' || *s == '[') {
		return bad(p, no, "flow collections other than {} and [] are not supported");
	} else if (*s == '\'') {
		if (n < 2 || s[n - 1] != '\'')
			return bad(p, no, "an unterminated 'single-quoted' string");
		char *v = malloc(n), *o = v;
		if (!v)
			return RS_ENOMEM;
		for (size_t k = 1; k + 1 < n; k++) {
			if (s[k] == '\'' && s[k + 1] == '\'' && k + 2 < n)
				k++;
			else if (s[k] == '\'') {
				free(v);
				return bad(p, no, "a lone quote inside a 'single-quoted' string");
			}
			*o++ = s[k];
		}
		*o = 0;
		*out = json_string(v);
		free(v);
	} else if (*s == '"') {
		if (n < 2 || s[n - 1] != '"')
			return bad(p, no, "an unterminated \"double-quoted\" string");
		char *v = malloc(n), *o = v;
		if (!v)
			return RS_ENOMEM;
		for (size_t k = 1; k + 1 < n; k++) {
			if (s[k] == '"') {
				free(v);
				return bad(p, no, "an unescaped quote inside a \"double-quoted\" string");
			}
			if (s[k] != '\\') {
				*o++ = s[k];
				continue;
			}
			if (k + 2 >= n) {
				free(v);
				return bad(p, no, "a backslash at the end of a \"double-quoted\" string");
			}
			char c = s[++k];
			*o++ = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
			if (c != '"' && c != '\\' && c != '/' && c != 'n' && c != 't' && c != 'r') {
				free(v);
				return bad(p, no, "an escape other than \\\" \\\\ \\/ \\n \\t \\r");
			}
		}
		*o = 0;
		*out = json_string(v);
		free(v);
	} else if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
		*out = json_true();
	} else if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
		*out = json_false();
	} else if (!strcmp(s, "null") || !strcmp(s, "~") || !strcmp(s, "Null") || !strcmp(s, "NULL")) {
		*out = json_null();
	} else {
		*out = json_string(s);
	}
	return *out ? RS_OK : bad(p, no, "not valid UTF-8, or out of memory");
}

/* Where "key:" ends in s (the colon), outside quotes, followed by a space or the end; -1 when not a mapping entry. */
static long key_end(const char *s)
{
	char quote = 0;
	for (const char *c = s; *c; c++) {
		if (quote) {
			if (*c == quote)
				quote = 0;
		} else if ((*c == '\'' || *c == '"') && c == s) {
			quote = *c;
		} else if (*c == ':' && (c[1] == ' ' || c[1] == 0)) {
			return c - s;
		}
	}
	return -1;
}

static int is_item(const char *s) { return s[0] == '-' && (s[1] == ' ' || s[1] == 0); }

static rs_status node(parser *p, int indent, int depth, json_t **out);

static rs_status mapping(parser *p, int indent, int depth, json_t **out)
{
	json_t *m = json_object();
	if (!m)
		return RS_ENOMEM;
	while (p->i < p->n && p->v[p->i].indent == indent && !is_item(p->v[p->i].text)) {
		line *l = &p->v[p->i];
		long ke = key_end(l->text);
		if (ke < 0) {
			json_decref(m);
			return bad(p, l->no, "expected \"key: value\"");
		}
		char *kt = strndup(l->text, (size_t)ke), *rest = l->text + ke + 1;
		json_t *key = NULL, *val = NULL;
		rs_status st = kt ? scalar(p, kt, l->no, &key) : RS_ENOMEM;
		free(kt);
		if (st == RS_OK && !json_is_string(key))
			st = bad(p, l->no, "a key must be a string");
		while (st == RS_OK && *rest == ' ')
			rest++;
		int no = l->no;
		p->i++;
		if (st == RS_OK && *rest) {
			st = scalar(p, rest, no, &val);
		} else if (st == RS_OK && p->i < p->n && p->v[p->i].indent > indent) {
			st = node(p, p->v[p->i].indent, depth + 1, &val);
		} else if (st == RS_OK && p->i < p->n && p->v[p->i].indent == indent && is_item(p->v[p->i].text)) {
			st = node(p, indent, depth + 1, &val); /* a compact sequence, at its key's indentation */
		} else if (st == RS_OK) {
			val = json_null();
		}
		if (st == RS_OK && json_object_get(m, json_string_value(key)))
			st = bad(p, no, "a key appears twice");
		if (st == RS_OK && json_object_set_new(m, json_string_value(key), val) != 0)
			st = RS_ENOMEM;
		else if (st != RS_OK)
			json_decref(val);
		json_decref(key);
		if (st != RS_OK) {
			json_decref(m);
			return st;
		}
	}
	*out = m;
	return RS_OK;
}

static rs_status sequence(parser *p, int indent, int depth, json_t **out)
{
	json_t *a = json_array();
	if (!a)
		return RS_ENOMEM;
	while (p->i < p->n && p->v[p->i].indent == indent && is_item(p->v[p->i].text)) {
		line *l = &p->v[p->i];
		const char *rest = l->text + 1;
		int off = 1;
		while (*rest == ' ')
			rest++, off++;
		json_t *item = NULL;
		rs_status st;
		if (!*rest) {
			p->i++;
			st = p->i < p->n && p->v[p->i].indent > indent ? node(p, p->v[p->i].indent, depth + 1, &item)
								       : ((item = json_null()), RS_OK);
		} else if (key_end(rest) >= 0 || is_item(rest)) {
			/* "- key: v" opens a mapping (or "- - x" a sequence) whose first line is the rest of this one */
			memmove(l->text, rest, strlen(rest) + 1);
			l->indent = indent + off;
			st = node(p, l->indent, depth + 1, &item);
		} else {
			st = scalar(p, rest, l->no, &item);
			p->i++;
		}
		if (st == RS_OK && json_array_append_new(a, item) != 0)
			st = RS_ENOMEM;
		if (st != RS_OK) {
			json_decref(a);
			return st;
		}
	}
	*out = a;
	return RS_OK;
}

static rs_status node(parser *p, int indent, int depth, json_t **out)
{
	if (depth > RS_YAML_MAX_DEPTH)
		return bad(p, p->v[p->i].no, "nested too deeply");
	if (is_item(p->v[p->i].text))
		return sequence(p, indent, depth, out);
	if (key_end(p->v[p->i].text) >= 0)
		return mapping(p, indent, depth, out);
	rs_status st = scalar(p, p->v[p->i].text, p->v[p->i].no, out);
	p->i++;
	return st;
}

rs_status rs_yaml_parse(const char *text, size_t len, const char *name, json_t **out, rs_err *err)
{
	parser p = {.name = name, .err = err};
	rs_status st;
	*out = NULL;
	if (len > RS_YAML_MAX_BYTES)
		return rs_err_set(err, RS_EINVAL, "%s: larger than %zu bytes", name, RS_YAML_MAX_BYTES);
	size_t lead = 0;
	while (lead < len && (text[lead] == ' ' || text[lead] == '\n' || text[lead] == '\r' || text[lead] == '\t'))
		lead++;
	if (lead < len && text[lead] == '{') {
		json_error_t jerr;
		*out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
		return *out ? RS_OK : rs_err_set(err, RS_EINVAL, "%s:%d: %s", name, jerr.line, jerr.text);
	}
	st = split_lines(&p, text, len);
	if (st == RS_OK && p.n == 0)
		*out = json_null();
	else if (st == RS_OK) {
		st = node(&p, p.v[0].indent, 0, out);
		if (st == RS_OK && p.i < p.n) {
			st = bad(&p, p.v[p.i].no, "unexpected indentation");
			json_decref(*out);
			*out = NULL;
		}
	}
	for (size_t k = 0; k < p.n; k++)
		free(p.v[k].text);
	free(p.v);
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "%s: out of memory", name);
	return st;
}
