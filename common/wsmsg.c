/*
 * wsmsg.c - see wsmsg.h.
 */
#include "common/wsmsg.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rs_wsmsg_init(rs_wsmsg *m, size_t rx_max, size_t queue_max)
{
	memset(m, 0, sizeof(*m));
	m->rx_max = rx_max;
	m->queue_max = queue_max;
}

void rs_wsmsg_free(rs_wsmsg *m)
{
	while (m->head) {
		rs_wsmsg_out *o = m->head;
		m->head = o->next;
		free(o->buf);
		free(o);
	}
	free(m->rx);
	memset(m, 0, sizeof(*m));
}

int rs_wsmsg_rx(rs_wsmsg *m, const void *in, size_t len, int first, int final, const char **msg, size_t *msg_len)
{
	if (first) {
		m->rx_len = 0;
		m->rx_overflow = 0;
	}
	if (!m->rx_overflow) {
		if (m->rx_len + len > m->rx_max) {
			m->rx_overflow = 1;
		} else {
			if (m->rx_len + len + 1 > m->rx_cap) {
				size_t cap = m->rx_cap ? m->rx_cap : 4096;
				while (cap < m->rx_len + len + 1)
					cap *= 2;
				char *b = realloc(m->rx, cap);
				if (!b) {
					m->rx_overflow = 1;
				} else {
					m->rx = b;
					m->rx_cap = cap;
				}
			}
			if (!m->rx_overflow) {
				memcpy(m->rx + m->rx_len, in, len);
				m->rx_len += len;
			}
		}
	}
	if (!final)
		return 0;
	if (m->rx_overflow)
		return -1;
	m->rx[m->rx_len] = 0;
	*msg = m->rx;
	*msg_len = m->rx_len;
	return 1;
}

/* A growing buffer with LWS_PRE bytes of headroom, the text after it. */
typedef struct outbuf {
	char *p;
	size_t len, cap; /* of the text */
	int failed;
} outbuf;

static void out_add(outbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, LWS_PRE + cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p, b->cap = cap;
	}
	memcpy(b->p + LWS_PRE + b->len, s, n);
	b->len += n;
}

static int out_dump(const char *s, size_t n, void *data)
{
	out_add(data, s, n);
	return ((outbuf *)data)->failed ? -1 : 0;
}

/* Whether s (n bytes) is a JSON string's text as it stands: printable ASCII, no quote or backslash. */
static int plain(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
			return 0;
	}
	return 1;
}

#define PLAIN_MIN 4096 /* a string member this long is copied, not encoded character by character */
#define PLAIN_MAX 4

/*
 * j's compact text into b. The long plain string members of an object (a
 * start message's deflated plans: the same for every member, about 80 KiB
 * at a thousand workers) go in by copy, first, the rest through jansson,
 * whose encoder takes each character apart.
 */
static void dump(outbuf *b, const json_t *j)
{
	const char *key[PLAIN_MAX];
	json_t *val[PLAIN_MAX], *rest = NULL;
	int n = 0;
	for (void *it = json_is_object(j) ? json_object_iter((json_t *)j) : NULL; it && n < PLAIN_MAX;
	     it = json_object_iter_next((json_t *)j, it)) {
		const char *k = json_object_iter_key(it);
		json_t *v = json_object_iter_value(it);
		size_t klen = json_object_iter_key_len(it);
		if (json_is_string(v) && json_string_length(v) >= PLAIN_MIN && plain(json_string_value(v), json_string_length(v)) &&
		    strlen(k) == klen && plain(k, klen)) /* a key with a NUL in it goes through jansson */
			key[n] = k, val[n++] = v;
	}
	if (n > 0 && (rest = json_copy((json_t *)j)) != NULL) { /* shallow: the values are shared */
		out_add(b, "{", 1);
		for (int i = 0; i < n; i++) {
			json_t *v = val[i];
			out_add(b, "\"", 1);
			out_add(b, key[i], strlen(key[i]));
			out_add(b, "\":\"", 3);
			out_add(b, json_string_value(v), json_string_length(v));
			out_add(b, "\"", 1);
			if (i + 1 < n || json_object_size(j) > (size_t)n)
				out_add(b, ",", 1);
		}
		for (int i = 0; i < n; i++)
			json_object_del(rest, key[i]);
		size_t before = b->len;
		if (json_dump_callback(rest, out_dump, b, JSON_COMPACT) != 0)
			b->failed = 1;
		else if (!b->failed) /* drop rest's own "{" */
			memmove(b->p + LWS_PRE + before, b->p + LWS_PRE + before + 1, --b->len - before);
		json_decref(rest);
		return;
	}
	if (json_dump_callback(j, out_dump, b, JSON_COMPACT) != 0)
		b->failed = 1;
}

rs_status rs_wsmsg_push(rs_wsmsg *m, const json_t *j)
{
	if (m->queued >= m->queue_max)
		return RS_ENOSPACE;
	outbuf b = {0};
	dump(&b, j);
	rs_wsmsg_out *o = b.failed || b.len == 0 ? NULL : calloc(1, sizeof(*o));
	if (!o) {
		free(b.p);
		return RS_ENOMEM;
	}
	char *fit = realloc(b.p, LWS_PRE + b.len + 1); /* the doubling's slack goes: a queue may hold many */
	o->buf = fit ? fit : b.p, o->len = b.len;
	if (m->tail)
		m->tail->next = o;
	else
		m->head = o;
	m->tail = o;
	m->queued++;
	return RS_OK;
}

int rs_wsmsg_write(rs_wsmsg *m, struct lws *wsi)
{
	rs_wsmsg_out *o = m->head;
	if (!o)
		return 0;
	int n = lws_write(wsi, (unsigned char *)o->buf + LWS_PRE, o->len, LWS_WRITE_TEXT);
	m->head = o->next;
	if (!m->head)
		m->tail = NULL;
	m->queued--;
	free(o->buf);
	free(o);
	if (n < 0)
		return -1;
	return (int)m->queued;
}

static lws_retry_bo_t idle_policy = {.secs_since_valid_ping = RS_WS_PING_S, .secs_since_valid_hangup = RS_WS_HANGUP_S};

const lws_retry_bo_t *rs_ws_idle_policy(void) { return &idle_policy; }

void rs_ws_set_idle_policy(uint16_t ping_s, uint16_t hangup_s)
{
	int ok = ping_s >= 1 && hangup_s > ping_s; /* 0 pings at once after every PONG; lws hangs up at once without a ping before */
	idle_policy.secs_since_valid_ping = ok ? ping_s : RS_WS_PING_S;
	idle_policy.secs_since_valid_hangup = ok ? hangup_s : RS_WS_HANGUP_S;
}

void rs_ws_set_hangup(uint16_t hangup_s)
{
	rs_ws_set_idle_policy(hangup_s / 20 > 1 ? (uint16_t)(hangup_s / 20) : 1, hangup_s);
	if (hangup_s != RS_WS_HANGUP_S)
		RS_INFO("--ws-hangup-s %d: a connection is closed %d s after its peer's last PONG (a PING after %d s)",
			(int)hangup_s, (int)idle_policy.secs_since_valid_hangup, (int)idle_policy.secs_since_valid_ping);
}

static void wake_up(lws_sorted_usec_list_t *sul)
{
	(void)sul; /* its only job is to end lws_service's wait */
}

void rs_ws_service(struct lws_context *ctx, int timeout_ms)
{
	if (timeout_ms <= 0) {
		lws_service(ctx, -1);
		return;
	}
	lws_sorted_usec_list_t sul;
	memset(&sul, 0, sizeof(sul));
	lws_sul_schedule(ctx, 0, &sul, wake_up, (lws_usec_t)timeout_ms * 1000);
	lws_service(ctx, 0);
	lws_sul_cancel(&sul);
}

static _Thread_local char lws_said[160];
static _Thread_local double lws_tokens = 10, lws_at; /* lines that may be logged now: 10 at once, then one a second */
static _Thread_local int lws_unlogged;

static void lws_emit(int level, const char *line)
{
	(void)level;
	const char *p = strstr(line, "] E: ");
	p = p ? p + 5 : line;
	snprintf(lws_said, sizeof(lws_said), "%.*s", (int)strcspn(p, "\r\n"), p);
	/* a peer can cause these (a garbled TLS handshake): at a bounded rate, the rest counted */
	double now = rs_now();
	lws_tokens = lws_tokens + (now - lws_at) > 10 ? 10 : lws_tokens + (now - lws_at);
	lws_at = now;
	if (lws_tokens < 1) {
		lws_unlogged++;
		return;
	}
	lws_tokens -= 1;
	if (lws_unlogged)
		RS_WARN("libwebsockets: %s (and %d more errors not logged one by one)", lws_said, lws_unlogged);
	else
		RS_WARN("libwebsockets: %s", lws_said);
	lws_unlogged = 0;
}

void rs_ws_log_init(void) { lws_set_log_level(LLL_ERR, lws_emit); }
const char *rs_ws_last_error(void) { return lws_said; }
void rs_ws_clear_error(void) { lws_said[0] = 0; }
