/*
 * server.c - see server.h.
 */
#include "coordinator/server_internal.h"
#include "common/limits.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/version.h"
#include "common/wsmsg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <libwebsockets.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#define CONTROL_MAX_MESSAGE (16u << 20)
#define CONTROL_MAX_QUEUED 1024
#define JOIN_MAX_MESSAGE 4096u       /* until a connection has joined, no message may be larger */
/*
 * A connection that has not joined by then is closed. An honest join is one
 * round trip after the challenge, and a worker gives each attempt 2 s
 * itself, counted from before it connects (worker/link.c), then tries again.
 */
#define JOIN_DEADLINE_S 2
#define REQUEST_DEADLINE_S 5         /* an HTTP request or a WebSocket upgrade must arrive whole in time */
#define MAX_UNJOINED_PER_PEER 8      /* the same, from one remote address (loopback excepted) */
#define FD_RESERVE 64                /* descriptors kept back from the server for files, pipes, the API */
#define REFUSAL_BURST 10             /* refusals logged at once before the limit of one a second */

struct rs_conn {
	rs_server *srv;
	struct lws *wsi;
	rs_wsmsg io;
	int joined;
	int closing;          /* close once the queue is written; nothing more is read */
	int waiting;          /* in the server's list of connections that have not joined */
	char worker[64];
	char nonce[RS_AUTH_NONCE_HEX + 1]; /* this connection's challenge */
	char peer[RS__PEER_LEN];
	struct rs_conn *older, *newer; /* that list, oldest first */
};

static void push(rs_conn *c, json_t *j)
{
	if (j && rs_wsmsg_push(&c->io, j) == RS_OK)
		lws_callback_on_writable(c->wsi);
	json_decref(j);
}

static void reply(rs_conn *c, rs_msg_type type, const char *reason) { push(c, rs_proto_make_reason(type, reason)); }

/*
 * Log what an unauthenticated peer caused: up to REFUSAL_BURST lines at
 * once, then one a second, the rest counted (and the count logged with the
 * next line, or by rs_server_service once a line may be logged again), so
 * a flood of them cannot flood the log.
 */
void rs__server_refusal(rs_server *s, const char *fmt, ...)
{
	char what[512];
	double now = rs_now();
	s->refusal_tokens += now - s->refusal_at;
	if (s->refusal_tokens > REFUSAL_BURST)
		s->refusal_tokens = REFUSAL_BURST;
	s->refusal_at = now;
	if (s->refusal_tokens < 1) {
		s->refusals_unlogged++;
		return;
	}
	s->refusal_tokens -= 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (s->refusals_unlogged)
		RS_WARN("%s (and %d more refusals in the last %.0f s)", what, s->refusals_unlogged, now - s->logged_at);
	else
		RS_WARN("%s", what);
	s->logged_at = now;
	s->refusals_unlogged = 0;
}

/* The refusals counted but not logged, once a line may be logged again. */
static void refusals_flush(rs_server *s)
{
	double now = rs_now();
	int n = s->refusals_unlogged;
	if (!n || s->refusal_tokens + (now - s->refusal_at) < 1)
		return;
	s->refusals_unlogged = 0;
	rs__server_refusal(s, "%d more refusals in the last %.0f s, not logged one by one", n, now - s->logged_at);
}

void rs__server_peer(struct lws *wsi, char out[RS__PEER_LEN])
{
	char buf[RS__PEER_LEN];
	const char *p = lws_get_peer_simple(wsi, buf, sizeof(buf));
	if (p && !strncmp(p, "::ffff:", 7) && strchr(p, '.'))
		p += 7;
	snprintf(out, RS__PEER_LEN, "%s", p ? p : "");
}

int rs__server_loopback(const char *peer) { return !strncmp(peer, "127.", 4) || !strcmp(peer, "::1"); }

/* ---- the control channel ------------------------------------------------------------- */

static void waiting_add(rs_server *s, rs_conn *c)
{
	c->older = s->newest;
	c->newer = NULL;
	if (s->newest)
		s->newest->newer = c;
	else
		s->oldest = c;
	s->newest = c;
	c->waiting = 1;
	s->unjoined++;
}

static void waiting_remove(rs_server *s, rs_conn *c)
{
	if (!c->waiting)
		return;
	if (c->older)
		c->older->newer = c->newer;
	else
		s->oldest = c->newer;
	if (c->newer)
		c->newer->older = c->older;
	else
		s->newest = c->older;
	c->older = c->newer = NULL;
	c->waiting = 0;
	s->unjoined--;
}

/* Close c, which has not joined, to make room for a newer connection. */
static void evict(rs_server *s, rs_conn *c, const char *why)
{
	rs__server_refusal(s, "control: closed the oldest of %s that had not joined yet, for a newer one", why);
	waiting_remove(s, c);
	c->closing = 1;
	lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/*
 * c has just connected: within the limits on connections that have not
 * joined, the oldest goes (rather than c), so that idle connections,
 * however many, delay an honest joiner by one round trip at most instead of
 * locking it out.
 */
static void make_room(rs_server *s, rs_conn *c)
{
	char why[128];
	if (!rs__server_loopback(c->peer)) {
		rs_conn *first = NULL;
		int same = 0;
		for (rs_conn *o = s->oldest; o; o = o->newer)
			if (!strcmp(o->peer, c->peer) && same++ == 0)
				first = o;
		if (same > MAX_UNJOINED_PER_PEER) {
			snprintf(why, sizeof(why), "%d connections from %s", same, c->peer);
			evict(s, first, why);
		}
	}
	if (s->unjoined > s->max_unjoined) {
		snprintf(why, sizeof(why), "%d connections", s->unjoined);
		evict(s, s->oldest, why);
	}
}

/*
 * A joiner that proved it holds the token, refused for good (another
 * protocol version, another model config): a refusal signed as a welcome
 * would be, so that the worker believes it and stops (an unsigned one it
 * would take for an impostor's after a restart).
 */
static void refuse_signed(rs_conn *c, const rs_msg_join *j, const char *why)
{
	rs_server *s = c->srv;
	char proof[RS_AUTH_PROOF_HEX + 1];
	rs__server_refusal(s, "control: refused worker '%s' from %s: %s", j->worker, c->peer, why);
	int signed_ok = rs_proto_answer_proof(s->token, c->nonce, s->bound_epoch, j, why, proof) == RS_OK;
	push(c, rs_proto_make_refused(why, signed_ok ? proof : NULL));
	c->closing = 1;
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
	else if (rs_proto_join_proof(s->token, c->nonce, s->bound_epoch, &j, want) != RS_OK || !rs_auth_equal(want, j.proof))
		why = "bad join token";
	else if (j.protocol != RS_PROTOCOL_VERSION) {
		char v[160];
		snprintf(v, sizeof(v), "control protocol %lld; this coordinator speaks %d (rowshift %s): run the same "
			 "rowshift version everywhere", (long long)j.protocol, RS_PROTOCOL_VERSION, RS_VERSION);
		refuse_signed(c, &j, v);
		return;
	} else if (s->model[0] && j.addr[0] && !j.model[0]) { /* a tool's join (no transport) carries none */
		refuse_signed(c, &j, "a worker's join must carry its model config's digest (control protocol 2): run the "
				     "same rowshift version everywhere");
		return;
	} else if (s->model[0] && j.model[0] && strcmp(s->model, j.model) != 0) {
		char v[200], sections[64];
		rs_config_digest_diff(s->model, j.model, sections, sizeof(sections));
		snprintf(v, sizeof(v), "its model config differs from the coordinator's in %s: every member of a job must "
			 "load the same model config", sections);
		refuse_signed(c, &j, v);
		return;
	} else if (rs_proto_answer_proof(s->token, c->nonce, s->bound_epoch, &j, "welcome", answer) != RS_OK)
		why = "the coordinator cannot make its proof";
	if (why) {
		/* the name is the joiner's word, not yet trusted: the parser kept it to letters, digits, '.', '_', '-' */
		if (parsed)
			rs__server_refusal(s, "control: refused worker '%s' from %s: %s", j.worker, c->peer, why);
		else
			rs__server_refusal(s, "control: refused a connection from %s: %s", c->peer, why);
		/*
		 * Unsigned: only a joiner that proved it holds the token may get an
		 * answer signed with it (a signature over a refusal would be an
		 * oracle for anyone else), and every refusal here is of one that
		 * did not, but the last (whose proof could not be made at all).
		 * A worker that a coordinator once welcomed takes an unsigned
		 * refusal for an impostor's and tries again (common/control.h).
		 */
		push(c, rs_proto_make_refused(why, NULL));
		c->closing = 1;
		return;
	}
	waiting_remove(s, c);
	c->joined = 1;
	c->io.rx_max = CONTROL_MAX_MESSAGE;
	lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
	snprintf(c->worker, sizeof(c->worker), "%s", j.worker);
	push(c, rs_proto_make_welcome(++s->next_id, answer));
	if (s->h.on_join)
		s->h.on_join(s->h.ctx, c, &j);
}

/*
 * A whole message. Before the join, the first message is the only one: it
 * joins, or the connection is refused and closed; nothing more is read.
 */
static void on_text(rs_conn *c, const char *text, size_t len)
{
	rs_server *s = c->srv;
	rs_err err = {0};
	const char *type;
	json_t *msg;

	if (rs_proto_parse(text, len, &msg, &type, &err) != RS_OK) {
		if (c->joined) {
			RS_WARN("control: from %s: %s", c->worker, err.msg);
			reply(c, RS_MSG_ERROR, err.msg);
		} else {
			rs__server_refusal(s, "control: refused a connection from %s: %s", c->peer, err.msg);
			push(c, rs_proto_make_refused(err.msg, NULL));
			c->closing = 1;
		}
		return;
	}
	if (!c->joined)
		on_join(c, msg);
	else if (s->h.on_message)
		s->h.on_message(s->h.ctx, c, msg);
	json_decref(msg);
}

/* Whether name (no port) is one this server answers to (see host_allowed). */
static int host_name_allowed(const rs_server *s, const char *name)
{
	unsigned char addr[4];
	size_t n = strlen(name);
	if (n && name[n - 1] == '.')
		n--; /* "localhost." is "localhost" */
	if (!n)
		return 0;
	if (inet_pton(AF_INET, name, addr) == 1 || (n == 9 && !strncasecmp(name, "localhost", 9)))
		return 1;
	for (const char *h = s->hosts; *h;) {
		size_t k = strcspn(h, ",");
		if (k == n && !strncasecmp(h, name, n))
			return 1;
		h += k + (h[k] == ',');
	}
	return 0;
}

/*
 * Whether a Host header ("name", "name:port", "v4:port", "[v6]:port") names
 * this server as a browser may reach it. An IP address is always one (a
 * page whose origin is an address was served from that address: DNS
 * rebinding needs a name); a name must be localhost or one allowed.
 */
static int host_allowed(const rs_server *s, const char *host)
{
	char name[256];
	unsigned char addr[16];
	if (host[0] == '[') {
		const char *end = strchr(host, ']');
		if (!end || (size_t)(end - host) >= sizeof(name) || (end[1] && end[1] != ':'))
			return 0;
		snprintf(name, sizeof(name), "%.*s", (int)(end - host - 1), host + 1);
		return inet_pton(AF_INET6, name, addr) == 1;
	}
	const char *colon = strchr(host, ':');
	if (colon && strchr(colon + 1, ':'))
		return 0; /* an IPv6 address must be in brackets */
	size_t n = colon ? (size_t)(colon - host) : strlen(host);
	if (n >= sizeof(name))
		return 0;
	snprintf(name, sizeof(name), "%.*s", (int)n, host);
	return host_name_allowed(s, name);
}

/* The Host of a request, or "" when it has none (not a browser's); -1 when it does not fit. */
static int request_host(struct lws *wsi, char *host, int len)
{
	host[0] = 0;
	if (lws_hdr_total_length(wsi, WSI_TOKEN_HOST) <= 0)
		return 0;
	return lws_hdr_copy(wsi, host, len, WSI_TOKEN_HOST) > 0 ? 0 : -1;
}

/*
 * A WebSocket upgrade from a web page carries an Origin: only the
 * coordinator's own pages (the dashboard: Origin http://HOST, where HOST is
 * the Host the request was sent to) may upgrade, and only under a Host this
 * server answers to (host_allowed): a page of another site that a DNS
 * rebinding pointed at this address keeps its own name in Host and Origin,
 * and is refused. Our own clients send no Origin.
 */
int rs__server_origin_allowed(rs_server *s, struct lws *wsi)
{
	char origin[300], host[256], own[300];
	if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) <= 0)
		return 1;
	int ok = lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) > 0 &&
		 request_host(wsi, host, sizeof(host)) == 0 && host[0] && host_allowed(s, host);
	if (ok) {
		snprintf(own, sizeof(own), "http://%s", host);
		ok = !strcmp(origin, own);
		snprintf(own, sizeof(own), "https://%s", host);
		ok = ok || !strcmp(origin, own);
	}
	if (!ok)
		rs__server_refusal(s, "refused a WebSocket upgrade from a page of another site (Origin %.80s, Host %.80s)",
			lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) < (int)sizeof(origin) ? origin : "(too long)",
			host[0] ? host : "(none)");
	return ok;
}

static int callback_control(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	rs_conn *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	const char *msg;
	size_t mlen;

	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		return rs__server_origin_allowed(s, wsi) ? 0 : -1;
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->srv = s;
		c->wsi = wsi;
		rs__server_peer(wsi, c->peer);
		/* until the join, a connection costs about 8 KiB (lws's 4 KiB, a 4 KiB message) and 2 s at most */
		rs_wsmsg_init(&c->io, JOIN_MAX_MESSAGE, CONTROL_MAX_QUEUED);
		waiting_add(s, c);
		make_room(s, c);
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, JOIN_DEADLINE_S);
		if (rs_auth_nonce(c->nonce) != RS_OK)
			return -1;
		push(c, rs_proto_make_challenge(c->nonce, s->epoch, s->term));
		break;
	case LWS_CALLBACK_RECEIVE: {
		if (c->closing)
			break; /* refused: nothing more of it is read into memory */
		int got = rs_wsmsg_rx(&c->io, in, len, lws_is_first_fragment(wsi), lws_is_final_fragment(wsi), &msg, &mlen);
		if (!c->joined && c->io.rx_overflow) {
			/* an unjoined peer sending more than a join can hold: refused and closed */
			rs__server_refusal(s, "control: refused a connection from %s that sent over %u bytes before joining", c->peer,
				JOIN_MAX_MESSAGE);
			push(c, rs_proto_make_refused("message too large: the join must come first and fit in 4096 bytes", NULL));
			c->closing = 1;
		} else if (got == 1) {
			on_text(c, msg, mlen);
		} else if (got == -1) {
			RS_WARN("control: from %s: message over %u bytes dropped", c->worker, CONTROL_MAX_MESSAGE);
			reply(c, RS_MSG_ERROR, "message too large");
		}
		break;
	}
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
		if (c->srv)
			waiting_remove(s, c);
		rs_wsmsg_free(&c->io);
		c->joined = 0;
		c->srv = NULL;
		break;
	default:
		break;
	}
	return 0;
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
	if (reason == LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION) {
		/* a WebSocket that asked for no subprotocol of ours lands here: refused, not left hanging */
		rs__server_refusal(s, "refused a WebSocket without the rowshift-status or rowshift-control subprotocol");
		lws_return_http_status(wsi, HTTP_STATUS_BAD_REQUEST, "ask for the WebSocket subprotocol rowshift-status (the "
				       "status stream; README, \"Watching a job\")"); /* best effort: closed either way */
		return -1;
	}
	if (reason != LWS_CALLBACK_HTTP)
		return lws_callback_http_dummy(wsi, reason, user, in, len);
	const char *path = in ? (const char *)in : "/";
	char host[256];
	if (!strcmp(path, "/healthz"))
		return http_reply(wsi, 200, "text/plain", "ok\n", 3);
	/* the page and /metrics, to a browser, only under a name of ours (see origin_allowed); the probes to anyone */
	if (strcmp(path, "/readyz") != 0 && (request_host(wsi, host, sizeof(host)) != 0 || (host[0] && !host_allowed(s, host)))) {
		rs__server_refusal(s, "refused an HTTP request under another host name (Host %.80s)", host[0] ? host : "(too long)");
		static const char no[] = "this server does not answer to that host name (see --allowed-hosts)\n";
		return http_reply(wsi, 403, "text/plain", no, sizeof(no) - 1);
	}
	/* what the job shows (metrics) is as private as the status stream; probes and the page itself are not */
	if (!strcmp(path, "/metrics") && !rs__status_authorized(s, wsi))
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
	/* 4 KiB: what lws holds per connection for what comes in (rs_wsmsg joins longer messages), joined or not */
	{"rowshift-control", callback_control, sizeof(rs_conn), 4096, 0, NULL, 0},
	{"rowshift-status", rs__status_callback, sizeof(status_client), 4096, 0, NULL, 0},
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

/* Add names ("name,name,...") to the host names browsers may use (see host_allowed). */
static rs_status allow_hosts(rs_server *s, const char *names)
{
	for (const char *p = names ? names : ""; *p;) {
		size_t n = strcspn(p, ","), used = strlen(s->hosts);
		if (!n || n > 253 || strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") < n)
			return RS_EINVAL;
		if (used + n + 2 > sizeof(s->hosts))
			return RS_ENOSPACE;
		snprintf(s->hosts + used, sizeof(s->hosts) - used, "%s%.*s", used ? "," : "", (int)n, p);
		p += n + (p[n] == ',');
	}
	return RS_OK;
}

int rs_server_port(const rs_server *s) { return s->port; }

/* Both TLS files or neither, each a readable PEM file: named now, since lws's own errors would not name them. */
static rs_status check_tls(const rs_server_opts *o, rs_err *err)
{
	static const char *const flag[2] = {"--tls-cert", "--tls-key"}, *const want[2] = {"CERTIFICATE", "PRIVATE KEY"};
	const char *file[2] = {o->tls_cert, o->tls_key};
	if (!file[0] != !file[1])
		return rs_err_set(err, RS_EINVAL, "%s without %s: TLS needs the certificate and its key", file[0] ? flag[0] : flag[1],
				  file[0] ? flag[1] : flag[0]);
	for (int i = 0; i < 2 && file[i]; i++) {
		char *pem = NULL;
		RSCHECK(rs_file_read(file[i], 1u << 20, &pem, NULL, err));
		int looks = strstr(pem, "-----BEGIN ") && strstr(pem, want[i]);
		explicit_bzero(pem, strlen(pem)); /* a key: not left in freed memory */
		free(pem);
		if (!looks)
			return rs_err_set(err, RS_EINVAL, "%s %s: no PEM %s in it", flag[i], file[i], i ? "private key" : "certificate");
	}
	return RS_OK;
}

rs_status rs_server_create(const rs_server_opts *o, const rs_server_handler *h, rs_server **out, rs_err *err)
{
	const char *listen = o->listen, *token = o->token, *hosts = o->hosts;
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
	if (o->model && !rs_config_digest_ok(o->model))
		return rs_err_set(err, RS_EINVAL, "server: '%.60s' is not a model config digest", o->model);
	RSCHECK(check_tls(o, err));
	rs_server *s = calloc(1, sizeof(*s));
	if (!s)
		return RS_ENOMEM;
	s->h = *h;
	snprintf(s->token, sizeof(s->token), "%s", token);
	snprintf(s->model, sizeof(s->model), "%s", o->model ? o->model : "");
	s->refusal_tokens = REFUSAL_BURST;
	s->refusal_at = s->logged_at = rs_now();
	unsigned char addr[16];
	if (host[0] && inet_pton(AF_INET, host, addr) != 1 && inet_pton(AF_INET6, host, addr) != 1 &&
	    allow_hosts(s, host) != RS_OK) {
		free(s);
		return rs_err_set(err, RS_EINVAL, "--listen: '%s' is not a host name or an address", host);
	}
	if (allow_hosts(s, hosts) != RS_OK) {
		free(s);
		return rs_err_set(err, RS_EINVAL, "--allowed-hosts: '%.200s' is not a list of host names (letters, digits, "
				  "'.', '-', comma-separated, 2 KiB at most)", hosts);
	}
	if (rs_auth_nonce(s->epoch) != RS_OK) {
		free(s);
		return rs_err_set(err, RS_ESYS, "control server: cannot draw an epoch");
	}
	s->term = o->term;
	rs_proto_bound_epoch(s->epoch, s->term, s->bound_epoch, sizeof(s->bound_epoch));
	rs_ws_log_init(); /* its errors through rs_log, escaped */
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = host;
	info.protocols = protocols;
	info.user = s;
	info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
	info.timeout_secs = REQUEST_DEADLINE_S;
	info.retry_and_idle_policy = rs_ws_idle_policy(); /* the workers', rowshiftctl's and browsers' connections */
	info.fd_limit_per_thread = fd_budget();
	/*
	 * At most a quarter of the descriptors: a flood of WebSockets meets the
	 * cap, and its eviction, with room left for silent TCP connections (each
	 * held until its 5 s deadline) before the limit, where lws stops
	 * accepting and the rest wait unanswered in the kernel's queue.
	 */
	unsigned int quarter = info.fd_limit_per_thread ? info.fd_limit_per_thread / 4 : 256;
	s->max_unjoined = o->max_unjoined > 0 ? o->max_unjoined : RS_MAX_WORKERS < quarter ? RS_MAX_WORKERS : (int)quarter;
	if (o->tls_cert) {
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.ssl_cert_filepath = o->tls_cert;
		info.ssl_private_key_filepath = o->tls_key;
		/*
		 * HTTP/1.1 only: offered h2, browsers take it, and this server's
		 * HTTP answers (one write per body) and Host checks (the Host
		 * header; h2 sends :authority) are HTTP/1.1's.
		 */
		info.alpn = "http/1.1";
	}
	s->ctx = lws_create_context(&info);
	if (!s->ctx) {
		free(s);
		if (o->tls_cert)
			return rs_err_set(err, RS_ELWS, "control server: cannot listen on %s with TLS (is the key --tls-key %s "
					  "the certificate's, --tls-cert %s?)", listen, o->tls_key, o->tls_cert);
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
	lws_context_destroy(s->ctx); /* closes every connection: the clients' references go */
	rs__status_free(s);
	free(s);
}

void rs_server_service(rs_server *s, int timeout_ms)
{
	rs_ws_service(s->ctx, timeout_ms);
	refusals_flush(s);
	rs__status_tick(s);
}

rs_status rs_server_send(rs_conn *c, const json_t *msg)
{
	rs_status st = rs_wsmsg_push(&c->io, msg);
	if (st == RS_OK)
		lws_callback_on_writable(c->wsi);
	return st;
}

const char *rs_conn_worker(const rs_conn *c) { return c->worker; }

rs_status rs_server_cert_names(const char *cert_file, const char *ip, rs_err *err)
{
	FILE *f = fopen(cert_file, "r");
	if (!f)
		return rs_err_set(err, RS_EIO, "--tls-cert %s: %s", cert_file, strerror(errno));
	X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	int ok = x && X509_check_ip_asc(x, ip, 0) == 1;
	X509_free(x);
	if (!ok)
		return rs_err_set(err, RS_EINVAL, "--tls-cert %s does not name %s, which the workers started here connect to "
				  "and verify (make one with: openssl req -x509 -newkey ec -pkeyopt "
				  "ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem -days 365 -subj "
				  "/CN=rowshift -addext subjectAltName=IP:%s)", cert_file, ip, ip);
	return RS_OK;
}
