/*
 * server.c - see server.h.
 */
#include "coordinator/server.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/wsmsg.h"

#include <libwebsockets.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define CONTROL_MAX_MESSAGE (16u << 20)
#define CONTROL_MAX_QUEUED 1024
#define JOIN_MAX_MESSAGE 4096u       /* until a connection has joined, no message may be larger */
#define JOIN_DEADLINE_S 10           /* a connection that has not joined by then is closed */
#define MAX_UNJOINED 64              /* control connections that have not joined yet, at most */
#define FD_RESERVE 64                /* descriptors kept back from the server for files, pipes, the API */

struct rs_conn {
	rs_server *srv;
	struct lws *wsi;
	rs_wsmsg io;
	int joined;
	int closing;          /* close once the queue is written */
	char worker[64];
	char nonce[RS_AUTH_NONCE_HEX + 1]; /* this connection's challenge */
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
	char status_protocol[1500]; /* "bearer.BASE64URL(status token)": how a browser presents it */
	int port;
	int64_t next_id;
	char epoch[RS_AUTH_NONCE_HEX + 1]; /* this coordinator process's: every handshake is bound to it */
	int unjoined;             /* control connections in their handshake */
	double refusal_at;        /* when a refusal was last logged */
	int refusals_unlogged;    /* refusals since then */
	status_client *clients;   /* every status client, for broadcasting */
	int nclients;
};

static void reply(rs_conn *c, rs_msg_type type, const char *reason)
{
	json_t *j = rs_proto_make_reason(type, reason);
	if (j && rs_wsmsg_push(&c->io, j) == RS_OK)
		lws_callback_on_writable(c->wsi);
	json_decref(j);
}

/*
 * Log a refusal: what unauthenticated peers cause is logged at most once a
 * second (with a count of the others), so a flood of them cannot flood the
 * log.
 */
static void refusal(rs_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refusal(rs_server *s, const char *fmt, ...)
{
	char what[512];
	double now = rs_now();
	if (now - s->refusal_at < 1.0) {
		s->refusals_unlogged++;
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (s->refusals_unlogged)
		RS_WARN("control: refused %s (and %d more in the last %.0f s)", what, s->refusals_unlogged, now - s->refusal_at);
	else
		RS_WARN("control: refused %s", what);
	s->refusal_at = now;
	s->refusals_unlogged = 0;
}

static void push(rs_conn *c, json_t *j)
{
	if (j && rs_wsmsg_push(&c->io, j) == RS_OK)
		lws_callback_on_writable(c->wsi);
	json_decref(j);
}

/* The coordinator's half of the join handshake (common/proto.h): prove ourselves, check the joiner's proof. */
static void on_join(rs_conn *c, json_t *msg)
{
	rs_server *s = c->srv;
	rs_msg_join j = {0};
	rs_err err = {0};
	char want[RS_AUTH_PROOF_HEX + 1], answer[RS_AUTH_PROOF_HEX + 1];
	const char *why = NULL;
	int parsed = rs_proto_join(msg, &j, &err) == RS_OK;
	if (!parsed)
		why = err.msg;
	else if (rs_proto_join_proof(s->token, c->nonce, s->epoch, &j, want) != RS_OK || !rs_auth_equal(want, j.proof))
		why = "bad join token";
	if (why) {
		/* the name is the joiner's word, not yet trusted: the parser kept it to letters, digits, '.', '_', '-' */
		if (parsed)
			refusal(s, "worker '%s': %s", j.worker, why);
		else
			refusal(s, "a connection: %s", why);
		int provable = parsed && rs_proto_answer_proof(s->token, c->nonce, s->epoch, &j, why, answer) == RS_OK;
		push(c, rs_proto_make_refused(why, provable ? answer : NULL));
		c->closing = 1;
		return;
	}
	if (rs_proto_answer_proof(s->token, c->nonce, s->epoch, &j, "welcome", answer) != RS_OK) {
		push(c, rs_proto_make_refused("the coordinator cannot make its proof", NULL));
		c->closing = 1;
		return;
	}
	c->joined = 1;
	s->unjoined--;
	c->io.rx_max = CONTROL_MAX_MESSAGE;
	lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
	snprintf(c->worker, sizeof(c->worker), "%s", j.worker);
	push(c, rs_proto_make_welcome(++s->next_id, answer));
	if (s->h.on_join)
		s->h.on_join(s->h.ctx, c, &j);
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
		if (!c->closing)
			on_join(c, msg);
		json_decref(msg);
		return;
	}
	if (s->h.on_message)
		s->h.on_message(s->h.ctx, c, msg);
	json_decref(msg);
}

/*
 * A WebSocket upgrade from a web page carries an Origin: only the
 * coordinator's own pages (the dashboard: Origin http://HOST where HOST is
 * the Host the request was sent to) may upgrade; our clients send none.
 * So a page elsewhere cannot reach the control channel or the status
 * stream through a browser, a port-forward or not.
 */
static int origin_allowed(struct lws *wsi)
{
	char origin[300], host[256], own[300];
	if (lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) <= 0)
		return 1;
	if (lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) > 0) {
		snprintf(own, sizeof(own), "http://%s", host);
		if (!strcmp(origin, own))
			return 1;
		snprintf(own, sizeof(own), "https://%s", host);
		if (!strcmp(origin, own))
			return 1;
	}
	for (char *p = origin; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?'; /* a header is the client's word: no escapes into the log */
	refusal(lws_context_user(lws_get_context(wsi)), "a WebSocket upgrade from another origin (%s)", origin);
	return 0;
}

static int callback_control(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	rs_conn *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	const char *msg;
	size_t mlen;

	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (!origin_allowed(wsi))
			return -1;
		if (s->unjoined >= MAX_UNJOINED) {
			refusal(s, "%d other connections have not joined yet", s->unjoined);
			return -1;
		}
		break;
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->srv = s;
		c->wsi = wsi;
		/* until the join, a connection costs a few KiB and a few seconds at most */
		rs_wsmsg_init(&c->io, JOIN_MAX_MESSAGE, CONTROL_MAX_QUEUED);
		s->unjoined++;
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, JOIN_DEADLINE_S);
		if (rs_auth_nonce(c->nonce) != RS_OK)
			return -1;
		push(c, rs_proto_make_challenge(c->nonce, s->epoch));
		break;
	case LWS_CALLBACK_RECEIVE:
		if (c->closing)
			break; /* refused: nothing more of it is read into memory */
		switch (rs_wsmsg_rx(&c->io, in, len, lws_is_first_fragment(wsi), lws_is_final_fragment(wsi), &msg, &mlen)) {
		case 1:
			on_text(c, msg, mlen);
			break;
		case -1:
			RS_WARN("control: from %s: message over %u bytes dropped", c->joined ? c->worker : "a new connection",
				c->joined ? CONTROL_MAX_MESSAGE : JOIN_MAX_MESSAGE);
			reply(c, RS_MSG_ERROR, "message too large");
			break;
		}
		if (!c->joined && c->io.rx_overflow && !c->closing) {
			/* an unjoined peer sending more than a join can hold: refused and closed */
			refusal(s, "a connection that sent over %u bytes before joining", JOIN_MAX_MESSAGE);
			push(c, rs_proto_make_refused("message too large: the join must come first and fit in 4096 bytes", NULL));
			c->closing = 1;
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
		if (!c->joined && c->srv)
			s->unjoined--;
		rs_wsmsg_free(&c->io);
		c->joined = 0;
		c->srv = NULL;
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
/*
 * Whether a request presents the status token: as "Authorization: Bearer
 * TOKEN" (rowshiftctl, curl, Prometheus) or, for a browser's WebSocket
 * (which cannot set headers), as a second subprotocol
 * "bearer.BASE64URL(TOKEN)" (the dashboard). Never in the URL, which ends
 * up in logs and histories.
 */
static int status_authorized(rs_server *s, struct lws *wsi)
{
	char buf[1600];
	if (!s->status_token[0])
		return 1;
	int n = lws_hdr_copy(wsi, buf, sizeof(buf), WSI_TOKEN_HTTP_AUTHORIZATION);
	if (n > 7 && !strncmp(buf, "Bearer ", 7) && rs_auth_equal(buf + 7, s->status_token))
		return 1;
	if (lws_hdr_copy(wsi, buf, sizeof(buf), WSI_TOKEN_PROTOCOL) <= 0)
		return 0;
	for (char *save = NULL, *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save))
		if (rs_auth_equal(p, s->status_protocol))
			return 1;
	return 0;
}

static int callback_status(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	status_client *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	(void)in;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (!origin_allowed(wsi))
			return -1;
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
	/* base64url without padding: what the dashboard's btoa() gives after its substitutions */
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const unsigned char *t = (const unsigned char *)s->status_token;
	size_t n = strlen(s->status_token), o = (size_t)snprintf(s->status_protocol, sizeof(s->status_protocol), "bearer.");
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)t[i] << 16 | (i + 1 < n ? (uint32_t)t[i + 1] << 8 : 0) | (i + 2 < n ? t[i + 2] : 0);
		int chars = i + 2 < n ? 4 : i + 1 < n ? 3 : 2;
		for (int k = 0; k < chars; k++)
			s->status_protocol[o++] = b64[(v >> (18 - 6 * k)) & 63];
	}
	s->status_protocol[o] = 0;
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
	/* what the job shows (metrics) is as private as the status stream; probes and the page itself are not */
	if (!strcmp(path, "/metrics") && !status_authorized(s, wsi))
		return http_reply(wsi, 401, "text/plain", "the status token is required\n", 29);
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

/*
 * The descriptors the server may use: as many as the process may open
 * (raised to its hard limit) minus a reserve, so that a flood of idle
 * connections makes the server refuse new ones instead of running the
 * process out of descriptors (where accept fails and is retried at once,
 * forever).
 */
static unsigned int fd_budget(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0; /* lws's default */
	rlim_t want = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
	if (want > rl.rlim_cur) {
		struct rlimit more = {want, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &more) == 0)
			rl.rlim_cur = want;
	}
	return rl.rlim_cur > 2 * FD_RESERVE ? (unsigned int)(rl.rlim_cur - FD_RESERVE) : (unsigned int)rl.rlim_cur / 2;
}

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
	if (rs_auth_nonce(s->epoch) != RS_OK) {
		free(s);
		return rs_err_set(err, RS_ESYS, "control server: cannot draw an epoch");
	}
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = host;
	info.protocols = protocols;
	info.user = s;
	info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
	info.timeout_secs = JOIN_DEADLINE_S; /* an HTTP request or upgrade must complete in time too */
	info.fd_limit_per_thread = fd_budget();
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
