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

struct rs_server {
	struct lws_context *ctx;
	rs_server_handler h;
	char token[1025];
	int port;
	int64_t next_id;
};

static int token_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;
	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

static void reply(rs_conn *c, const char *type, const char *reason)
{
	json_t *j = json_pack("{s:s, s:s}", "type", type, "reason", reason);
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
		reply(c, "error", err.msg);
		return;
	}
	if (!c->joined) {
		rs_msg_join j;
		if (rs_proto_join(msg, &j, &err) != RS_OK) {
			RS_WARN("control: refused a connection: %s", err.msg);
			reply(c, "refused", err.msg);
			c->closing = 1;
		} else if (!token_equal(j.token, s->token)) {
			RS_WARN("control: refused worker '%s': bad join token", j.worker);
			reply(c, "refused", "bad join token");
			c->closing = 1;
		} else {
			c->joined = 1;
			snprintf(c->worker, sizeof(c->worker), "%s", j.worker);
			json_t *w = json_pack("{s:s, s:I}", "type", "welcome", "worker_id", (json_int_t)++s->next_id);
			if (w && rs_wsmsg_push(&c->io, w) == RS_OK)
				lws_callback_on_writable(c->wsi);
			json_decref(w);
			if (s->h.on_join)
				s->h.on_join(s->h.ctx, c, c->worker, j.addr, j.pid);
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
			reply(c, "error", "message too large");
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

static struct lws_protocols protocols[] = {
	{"http", lws_callback_http_dummy, 0, 0, 0, NULL, 0},
	{"rowshift-control", callback_control, sizeof(rs_conn), 65536, 0, NULL, 0},
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
