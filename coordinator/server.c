/*
 * server.c - see server.h.
 */
#include "coordinator/server.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/wsmsg.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONTROL_MAX_MESSAGE (16u << 20)
#define CONTROL_MAX_QUEUED 1024

struct rs_conn {
	rs_server *srv;
	struct lws *wsi;
	rs_wsmsg io;
	int joined;
	int closing;          /* close once the queue is written */
	char worker[64];
};

/* A status message, serialized once and shared by the clients' queues. */
typedef struct shared_msg {
	int refs;
	size_t len;
	unsigned char buf[]; /* LWS_PRE bytes of headroom, then the text */
} shared_msg;

/* One status client (lws's per-session data of the status protocol). */
typedef struct status_client {
	rs_server *srv;
	struct lws *wsi;
	shared_msg *q[RS_STATUS_MAX_QUEUED];
	size_t head, n, bytes;
	int needs_snapshot;       /* its queue was dropped (or it just came): a snapshot goes next */
	size_t rx;                /* bytes of the message it is sending us (ignored) */
	struct status_client *prev, *next;
} status_client;

struct rs_server {
	struct lws_context *ctx;
	rs_server_handler h;
	char token[1025];
	char status_token[1025];
	int port;
	int64_t next_id;
	status_client *clients;   /* every status client, for broadcasting */
	int nclients;
};

static int token_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;
	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

static void reply(rs_conn *c, rs_msg_type type, const char *reason)
{
	json_t *j = rs_proto_make_reason(type, reason);
	if (j && rs_wsmsg_push(&c->io, j) == RS_OK)
		lws_callback_on_writable(c->wsi);
	json_decref(j);
}

static void on_text(rs_conn *c, const char *text, size_t len)
{
	rs_server *s = c->srv;
	rs_err err = {0};
	const char *type;
	json_t *msg;

	if (rs_proto_parse(text, len, &msg, &type, &err) != RS_OK) {
		RS_WARN("control: from %s: %s", c->joined ? c->worker : "a new connection", err.msg);
		reply(c, RS_MSG_ERROR, err.msg);
		return;
	}
	if (!c->joined) {
		rs_msg_join j;
		if (rs_proto_join(msg, &j, &err) != RS_OK) {
			RS_WARN("control: refused a connection: %s", err.msg);
			reply(c, RS_MSG_REFUSED, err.msg);
			c->closing = 1;
		} else if (!token_equal(j.token, s->token)) {
			RS_WARN("control: refused worker '%s': bad join token", j.worker);
			reply(c, RS_MSG_REFUSED, "bad join token");
			c->closing = 1;
		} else {
			c->joined = 1;
			snprintf(c->worker, sizeof(c->worker), "%s", j.worker);
			json_t *w = rs_proto_make_welcome(++s->next_id);
			if (w && rs_wsmsg_push(&c->io, w) == RS_OK)
				lws_callback_on_writable(c->wsi);
			json_decref(w);
			if (s->h.on_join)
				s->h.on_join(s->h.ctx, c, &j);
		}
		json_decref(msg);
		return;
	}
	if (s->h.on_message)
		s->h.on_message(s->h.ctx, c, msg);
	json_decref(msg);
}

static int callback_control(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	rs_conn *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	const char *msg;
	size_t mlen;

	switch (reason) {
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->srv = s;
		c->wsi = wsi;
		rs_wsmsg_init(&c->io, CONTROL_MAX_MESSAGE, CONTROL_MAX_QUEUED);
		break;
	case LWS_CALLBACK_RECEIVE:
		switch (rs_wsmsg_rx(&c->io, in, len, lws_is_first_fragment(wsi), lws_is_final_fragment(wsi), &msg, &mlen)) {
		case 1:
			on_text(c, msg, mlen);
			break;
		case -1:
			RS_WARN("control: from %s: message over %u bytes dropped", c->joined ? c->worker : "a new connection",
				CONTROL_MAX_MESSAGE);
			reply(c, RS_MSG_ERROR, "message too large");
			break;
		}
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (rs_wsmsg_write(&c->io, wsi) < 0)
			return -1;
		if (c->io.head)
			lws_callback_on_writable(wsi);
		else if (c->closing)
			return -1;
		break;
	case LWS_CALLBACK_CLOSED:
		if (c->joined && s->h.on_close)
			s->h.on_close(s->h.ctx, c);
		rs_wsmsg_free(&c->io);
		c->joined = 0;
		break;
	default:
		break;
	}
	return 0;
}

/* ---- the status stream --------------------------------------------------------------- */

static shared_msg *shared_new(const json_t *j)
{
	char *text = json_dumps(j, JSON_COMPACT);
	size_t len = text ? strlen(text) : 0;
	shared_msg *m = text ? malloc(sizeof(*m) + LWS_PRE + len) : NULL;
	if (m) {
		m->refs = 1;
		m->len = len;
		memcpy(m->buf + LWS_PRE, text, len);
	}
	free(text);
	return m;
}

static void shared_unref(shared_msg *m)
{
	if (m && --m->refs == 0)
		free(m);
}

static void client_drop_queue(status_client *c)
{
	for (; c->n; c->n--, c->head = (c->head + 1) % RS_STATUS_MAX_QUEUED)
		shared_unref(c->q[c->head]);
	c->bytes = 0;
}

/* Queue m to c, or when c is too far behind, drop its queue for a snapshot later. */
static void client_push(status_client *c, shared_msg *m)
{
	if (c->needs_snapshot)
		return; /* the snapshot will include this */
	if (c->n == RS_STATUS_MAX_QUEUED || c->bytes + m->len > RS_STATUS_MAX_BYTES) {
		client_drop_queue(c);
		c->needs_snapshot = 1;
	} else {
		m->refs++;
		c->q[(c->head + c->n++) % RS_STATUS_MAX_QUEUED] = m;
		c->bytes += m->len;
	}
	lws_callback_on_writable(c->wsi);
}

static int client_write(status_client *c)
{
	shared_msg *m;
	if (c->needs_snapshot) {
		json_t *snap = c->srv->h.status_snapshot ? c->srv->h.status_snapshot(c->srv->h.ctx) : NULL;
		c->needs_snapshot = 0;
		if (!snap)
			return 0;
		m = shared_new(snap);
		json_decref(snap);
		if (!m)
			return -1;
	} else if (c->n) {
		m = c->q[c->head];
		c->head = (c->head + 1) % RS_STATUS_MAX_QUEUED;
		c->n--;
		c->bytes -= m->len;
	} else {
		return 0;
	}
	int rc = lws_write(c->wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
	shared_unref(m);
	if (rc < 0)
		return -1;
	if (c->n || c->needs_snapshot)
		lws_callback_on_writable(c->wsi);
	return 0;
}

/* Whether the connecting client presented the status token (header or ?token=). */
static int status_authorized(rs_server *s, struct lws *wsi)
{
	char buf[1100];
	if (!s->status_token[0])
		return 1;
	int n = lws_hdr_copy(wsi, buf, sizeof(buf), WSI_TOKEN_HTTP_AUTHORIZATION);
	if (n > 7 && !strncmp(buf, "Bearer ", 7) && token_equal(buf + 7, s->status_token))
		return 1;
	const char *v = lws_get_urlarg_by_name(wsi, "token=", buf, sizeof(buf));
	return v && token_equal(v, s->status_token);
}

static int callback_status(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	status_client *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	(void)in;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (!status_authorized(s, wsi)) {
			RS_WARN("status: refused a client without the status token");
			return -1;
		}
		break;
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->srv = s;
		c->wsi = wsi;
		c->needs_snapshot = 1;
		c->next = s->clients;
		if (s->clients)
			s->clients->prev = c;
		s->clients = c;
		s->nclients++;
		lws_callback_on_writable(wsi);
		break;
	case LWS_CALLBACK_RECEIVE:
		/* read-only: what a client says is ignored, but it may not say much */
		c->rx = lws_is_first_fragment(wsi) ? len : c->rx + len;
		if (c->rx > RS_STATUS_MAX_INCOMING) {
			RS_WARN("status: closing a client that sent a message over %d bytes", RS_STATUS_MAX_INCOMING);
			return -1;
		}
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return client_write(c);
	case LWS_CALLBACK_CLOSED:
		client_drop_queue(c);
		if (c->prev)
			c->prev->next = c->next;
		else if (s->clients == c)
			s->clients = c->next;
		if (c->next)
			c->next->prev = c->prev;
		c->prev = c->next = NULL;
		s->nclients--;
		break;
	default:
		break;
	}
	return 0;
}

void rs_server_publish(rs_server *s, const json_t *event)
{
	if (!s || !s->clients)
		return;
	shared_msg *m = shared_new(event);
	if (!m) {
		/* out of memory: everyone starts over from a snapshot */
		for (status_client *c = s->clients; c; c = c->next) {
			client_drop_queue(c);
			c->needs_snapshot = 1;
			lws_callback_on_writable(c->wsi);
		}
		return;
	}
	for (status_client *c = s->clients; c; c = c->next)
		client_push(c, m);
	shared_unref(m);
}

int rs_server_status_clients(const rs_server *s) { return s->nclients; }

size_t rs_server_status_queued(const rs_server *s)
{
	size_t total = 0;
	for (const status_client *c = s->clients; c; c = c->next)
		total += c->bytes;
	return total;
}

rs_status rs_server_set_status_token(rs_server *s, const char *token)
{
	if (token && strlen(token) >= sizeof(s->status_token))
		return RS_EINVAL;
	snprintf(s->status_token, sizeof(s->status_token), "%s", token ? token : "");
	return RS_OK;
}

/* ---- plain HTTP ---------------------------------------------------------------------------- */

static int http_reply(struct lws *wsi, unsigned int code, const char *type, const char *body, size_t len)
{
	unsigned char hdr[LWS_PRE + 512], *p = hdr + LWS_PRE, *end = hdr + sizeof(hdr);
	unsigned char *buf = malloc(LWS_PRE + len + 1);
	if (!buf)
		return -1;
	memcpy(buf + LWS_PRE, body, len);
	int bad = lws_add_http_common_headers(wsi, code, type, (lws_filepos_t)len, &p, end) ||
		  lws_finalize_write_http_header(wsi, hdr + LWS_PRE, &p, end) ||
		  lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_HTTP_FINAL) != (int)len;
	free(buf);
	if (bad)
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int callback_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	rs_server *s = lws_context_user(lws_get_context(wsi));
	if (reason != LWS_CALLBACK_HTTP)
		return lws_callback_http_dummy(wsi, reason, user, in, len);
	const char *path = in ? (const char *)in : "/";
	if (!strcmp(path, "/healthz"))
		return http_reply(wsi, 200, "text/plain", "ok\n", 3);
	char *body = NULL;
	size_t blen = 0;
	const char *type = "text/plain";
	int code = s->h.http_get ? s->h.http_get(s->h.ctx, path, &body, &blen, &type) : 404;
	if (!body) {
		code = code == 200 ? 500 : code;
		body = strdup(code == 404 ? "not found\n" : "error\n");
		blen = body ? strlen(body) : 0;
		type = "text/plain";
	}
	int rc = body ? http_reply(wsi, (unsigned)code, type, body, blen) : -1;
	free(body);
	return rc;
}

static struct lws_protocols protocols[] = {
	{"http", callback_http, 0, 0, 0, NULL, 0},
	{"rowshift-control", callback_control, sizeof(rs_conn), 65536, 0, NULL, 0},
	{"rowshift-status", callback_status, sizeof(status_client), 4096, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

rs_status rs_server_create(const char *listen, const char *token, const rs_server_handler *h, rs_server **out,
			   rs_err *err)
{
	char host[256];
	const char *colon = strrchr(listen, ':');
	*out = NULL;
	if (!colon || (size_t)(colon - listen) >= sizeof(host) || !colon[1])
		return rs_err_set(err, RS_EINVAL, "--listen: '%s' is not HOST:PORT", listen);
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = 0;
	int port = atoi(colon + 1);
	if (port < 0 || port > 65535)
		return rs_err_set(err, RS_EINVAL, "--listen: bad port in '%s'", listen);
	if (strlen(token) >= sizeof(((rs_server *)0)->token))
		return rs_err_set(err, RS_EINVAL, "join token longer than 1024 bytes");
	rs_server *s = calloc(1, sizeof(*s));
	if (!s)
		return RS_ENOMEM;
	s->h = *h;
	snprintf(s->token, sizeof(s->token), "%s", token);
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = host;
	info.protocols = protocols;
	info.user = s;
	info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
	s->ctx = lws_create_context(&info);
	if (!s->ctx) {
		free(s);
		return rs_err_set(err, RS_ELWS, "control server: cannot listen on %s", listen);
	}
	s->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(s->ctx, "default"));
	if (s->port <= 0)
		s->port = port;
	*out = s;
	return RS_OK;
}

void rs_server_destroy(rs_server *s)
{
	if (!s)
		return;
	lws_context_destroy(s->ctx);
	free(s);
}

int rs_server_port(const rs_server *s) { return s->port; }

void rs_server_service(rs_server *s, int timeout_ms)
{
	rs_ws_service(s->ctx, timeout_ms);
}

rs_status rs_server_send(rs_conn *c, const json_t *msg)
{
	rs_status st = rs_wsmsg_push(&c->io, msg);
	if (st == RS_OK)
		lws_callback_on_writable(c->wsi);
	return st;
}

const char *rs_conn_worker(const rs_conn *c) { return c->worker; }
