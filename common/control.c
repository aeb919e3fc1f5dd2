/*
 * control.c - see control.h.
 */
#include "common/control.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/secret.h"
#include "common/wsmsg.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONTROL_MAX_MESSAGE (64u << 20)
#define CONTROL_MAX_QUEUED 4096
#define HANDSHAKE_MAX_MESSAGE 4096u /* until the coordinator proved itself, no message may be larger */

typedef struct inbox {
	json_t *msg;
	struct inbox *next;
} inbox;

/* What checking the coordinator's answer to a join takes (the handshake's, while it waits for that answer). */
typedef struct answer_check {
	const char *token, *challenge, *epoch;
	const rs_msg_join *join;
} answer_check;

struct rs_control {
	struct lws_context *ctx;
	struct lws *wsi;
	rs_wsmsg io;
	inbox *head, *tail;
	int connected, closed;
	int untrusted;          /* the connection failed TLS verification: the server's certificate is not to be trusted */
	/*
	 * A control connection whose peer has not proved it is the coordinator
	 * (a welcome with its proof): it may send one message of at most
	 * HANDSHAKE_MAX_MESSAGE bytes at a time, read before the next comes,
	 * or it is hung up on. An impostor costs a few KiB.
	 */
	int guarded;
	const answer_check *check; /* set while the answer to our join is due */
	char why[400];
	double proof_at;        /* when the peer last proved it answers, as lws counts it: connected or a PONG (rs_now) */
	char bearer[1100];      /* "Authorization: Bearer ..." value for the status stream, or "" */
};

/* Whether reply is a welcome or a refusal carrying the coordinator's proof over this join. */
static int answer_proven(const answer_check *a, json_t *reply)
{
	rs_msg_reply r;
	rs_err e = {0};
	char want[RS_AUTH_PROOF_HEX + 1];
	return rs_proto_reply(reply, &r, &e) == RS_OK && (r.type == RS_MSG_WELCOME || r.type == RS_MSG_REFUSED) &&
	       r.proof &&
	       rs_proto_answer_proof(a->token, a->challenge, a->epoch, a->join,
				     r.type == RS_MSG_WELCOME ? "welcome" : r.reason, want) == RS_OK &&
	       rs_auth_equal(want, r.proof);
}

/* Close the connection from its callback: the peer broke the handshake's rules. */
static int hang_up(rs_control *c, const char *why)
{
	snprintf(c->why, sizeof(c->why), "the peer %s before proving it is the coordinator: hung up", why);
	c->closed = 1;
	return -1;
}

/* A whole message: into the inbox, within the rules of a guarded connection. */
static int on_message(rs_control *c, const char *msg, size_t len)
{
	if (c->guarded && c->head)
		return hang_up(c, "sent a second message unasked");
	json_error_t jerr;
	json_t *j = json_loadb(msg, len, 0, &jerr);
	inbox *b = j && json_is_object(j) ? malloc(sizeof(*b)) : NULL;
	if (!b) {
		json_decref(j);
		if (c->guarded)
			return hang_up(c, "sent a malformed message");
		RS_WARN("control: dropped a malformed message from the coordinator");
		return 0;
	}
	if (c->guarded && c->check && rs_proto_kind(j) == RS_MSG_WELCOME && answer_proven(c->check, j)) {
		c->guarded = 0; /* the coordinator: what it sends next may be as large as a plan */
		c->io.rx_max = CONTROL_MAX_MESSAGE;
	}
	*b = (inbox){j, NULL};
	if (c->tail)
		c->tail->next = b;
	else
		c->head = b;
	c->tail = b;
	return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	(void)user;
	rs_control *c = lws_context_user(lws_get_context(wsi));
	const char *msg;
	size_t mlen;

	if (!c)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		c->connected = 1;
		c->proof_at = rs_now();
		if (c->io.head)
			lws_callback_on_writable(wsi);
		break;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		snprintf(c->why, sizeof(c->why), "cannot connect: %s%s%s%s", in ? (const char *)in : "unknown error",
			 rs_ws_last_error()[0] ? " (" : "", rs_ws_last_error(), rs_ws_last_error()[0] ? ")" : "");
		/* lws says "SSL error: <why> (preverify_ok=0;...)" when the certificate or its name does not check out */
		c->untrusted = strstr(rs_ws_last_error(), "preverify_ok=0") != NULL;
		c->closed = 1;
		c->wsi = NULL;
		break;
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		c->proof_at = rs_now();
		break;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		switch (rs_wsmsg_rx(&c->io, in, len, lws_is_first_fragment(wsi), lws_is_final_fragment(wsi), &msg, &mlen)) {
		case 1:
			return on_message(c, msg, mlen);
		case -1:
			RS_WARN("control: dropped an oversized message from the coordinator");
			break;
		default:
			if (c->guarded && c->io.rx_overflow) /* not a byte more of it */
				return hang_up(c, "sent a message over 4096 bytes");
			break;
		}
		break;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (rs_wsmsg_write(&c->io, wsi) < 0)
			return -1;
		if (c->io.head)
			lws_callback_on_writable(wsi);
		break;
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
		if (c->bearer[0]) {
			unsigned char **p = (unsigned char **)in, *end = (*p) + len;
			if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, (unsigned char *)c->bearer,
							 (int)strlen(c->bearer), p, end))
				return -1;
		}
		break;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: /* in: the close frame's status code (2 bytes), then its reason */
		snprintf(c->why, sizeof(c->why), "the coordinator closed the connection (status %u)",
			 len >= 2 ? (unsigned)((const unsigned char *)in)[0] << 8 | ((const unsigned char *)in)[1] : 0u);
		break;
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (!c->closed && !c->why[0]) {
			/* past the hang-up time: ours, or the coordinator's if this side was too busy to answer */
			double quiet = rs_now() - c->proof_at;
			int hangup = rs_ws_idle_policy()->secs_since_valid_hangup;
			if (quiet >= hangup - 1)
				snprintf(c->why, sizeof(c->why),
					 "no answer from the coordinator for %.0f s, past the %d s hang-up time: one side "
					 "hung up (the coordinator, if this side was busy)", quiet, hangup);
			else
				snprintf(c->why, sizeof(c->why), "the connection ended without a close from the coordinator");
		}
		c->closed = 1;
		c->wsi = NULL;
		break;
	default:
		break;
	}
	return 0;
}

static struct lws_protocols protocols[] = {
	{"rowshift-control", callback, 0, 65536, 0, NULL, 0},
	{"rowshift-status", callback, 0, 65536, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

rs_status rs_control_send(rs_control *c, const json_t *msg)
{
	if (c->closed)
		return RS_EPEER;
	rs_status st = rs_wsmsg_push(&c->io, msg);
	if (st == RS_OK && c->connected && c->wsi)
		lws_callback_on_writable(c->wsi);
	return st;
}

rs_status rs_control_poll(rs_control *c)
{
	if (!c->closed)
		rs_ws_service(c->ctx, 0);
	return c->closed && !c->head ? RS_EPEER : RS_OK;
}

const char *rs_control_why(const rs_control *c) { return c->closed ? c->why : ""; }

rs_status rs_control_recv(rs_control *c, int timeout_ms, json_t **msg)
{
	int64_t deadline = rs_now_ms() + timeout_ms;
	*msg = NULL;
	while (!c->head) {
		if (c->closed)
			return RS_EPEER;
		int64_t left = deadline - rs_now_ms();
		if (left <= 0)
			return RS_ETIMEDOUT;
		/* the whole wait at once: a message, a close or any other event ends it early (an idle
		 * worker wakes once per call, not every 50 ms: a thousand on one machine took its cores) */
		rs_ws_service(c->ctx, left > INT32_MAX ? INT32_MAX : (int)left);
	}
	inbox *b = c->head;
	c->head = b->next;
	if (!c->head)
		c->tail = NULL;
	*msg = b->msg;
	free(b);
	return RS_OK;
}

rs_status rs_control_flush(rs_control *c, int timeout_ms)
{
	int64_t deadline = rs_now_ms() + timeout_ms;
	while (c->io.head) {
		if (c->closed)
			return RS_EPEER;
		if (rs_now_ms() >= deadline)
			return RS_ETIMEDOUT;
		rs_ws_service(c->ctx, 20);
	}
	return RS_OK;
}

/*
 * This process's incarnation: random, drawn once, sent with every join, so
 * that the coordinator tells a worker that reconnects from a new process
 * under the same name (a restarted pod, where pids repeat) from one that
 * only lost its connection. In a pod it begins with the pod's uid and a
 * dot (rs_control_set_pod_uid): the coordinator tells the deletion of an
 * earlier pod of the same name, seen late, from this one's.
 */
static char pod_uid[RS_POD_UID_MAX + 1];
static char incarnation_text[RS_POD_UID_MAX + 1 + 32 + 1]; /* at most 64 (a join's bound): 16 random digits after a uid */
static pthread_once_t incarnation_once = PTHREAD_ONCE_INIT;

static void draw_incarnation(void)
{
	char rnd[33];
	if (rs_secret_hex(rnd, sizeof(rnd), 16) != RS_OK) {
		/* no randomness from the kernel: time and pid still differ between restarts */
		snprintf(rnd, sizeof(rnd), "%016llx%08x", (unsigned long long)rs_now_ms(), (unsigned)getpid());
	}
	if (pod_uid[0])
		snprintf(incarnation_text, sizeof(incarnation_text), "%s.%.16s", pod_uid, rnd);
	else
		snprintf(incarnation_text, sizeof(incarnation_text), "%s", rnd);
}

int rs_incarnation_of_pod(const char *incarnation, const char *uid)
{
	const char *dot = strchr(incarnation, '.');
	size_t n = uid ? strlen(uid) : 0;
	return !n || !dot || ((size_t)(dot - incarnation) == n && !strncmp(incarnation, uid, n));
}

rs_status rs_control_set_pod_uid(const char *uid, rs_err *err)
{
	if (!uid || !*uid)
		return RS_OK;
	if (strlen(uid) > RS_POD_UID_MAX || strspn(uid, "0123456789abcdefABCDEF-") != strlen(uid))
		return rs_err_set(err, RS_EINVAL, "pod uid '%.48s': not a Kubernetes uid (at most %d hex digits and '-')",
				  uid, RS_POD_UID_MAX);
	snprintf(pod_uid, sizeof(pod_uid), "%s", uid);
	return RS_OK;
}

static const char *incarnation(void)
{
	pthread_once(&incarnation_once, draw_incarnation);
	return incarnation_text;
}

static char tls_ca[4096]; /* rs_control_set_tls_ca's file, "" for the system's CAs */

rs_status rs_control_set_tls_ca(const char *file, rs_err *err)
{
	tls_ca[0] = 0;
	if (!file || !*file)
		return RS_OK;
	if (strlen(file) >= sizeof(tls_ca))
		return rs_err_set(err, RS_EINVAL, "--tls-ca: the path is longer than %zu bytes", sizeof(tls_ca) - 1);
	/* read here, so that a missing or unreadable file is named now, not as a failed handshake later */
	char *pem = NULL;
	size_t n;
	RSCHECK(rs_file_read(file, 1u << 20, &pem, &n, err));
	int looks = strstr(pem, "-----BEGIN CERTIFICATE-----") != NULL;
	free(pem);
	if (!looks)
		return rs_err_set(err, RS_EINVAL, "--tls-ca %s: no PEM certificate in it", file);
	snprintf(tls_ca, sizeof(tls_ca), "%s", file);
	return RS_OK;
}

/* "ws://HOST:PORT" or "wss://HOST:PORT" (TLS; HOST then a name or an IPv4 address); for ws://, HOST may be [v6]. */
static rs_status parse_url(const char *url, char host[256], int *port, int *tls, rs_err *err)
{
	char rest[16] = "";
	const char *p = url;
	*tls = !strncmp(url, "wss://", 6);
	p += *tls ? 6 : !strncmp(url, "ws://", 5) ? 5 : 0;
	int ok = p != url;
	if (ok && *p == '[')
		ok = sscanf(p, "[%255[0-9a-fA-F:.]]:%d%15s", host, port, rest) >= 2;
	else if (ok)
		ok = sscanf(p, "%255[^:/[]:%d%15s", host, port, rest) >= 2;
	ok = ok && (!rest[0] || !strcmp(rest, "/")); /* nothing after the port but a slash */
	if (!ok || *port <= 0 || *port > 65535)
		return rs_err_set(err, RS_EINVAL, "coordinator URL '%.200s' is not ws://HOST:PORT or wss://HOST:PORT", url);
	if (*tls && strlen(host) > 127) /* lws copies the name it checks the certificate against into 128 bytes */
		return rs_err_set(err, RS_EINVAL, "coordinator URL '%.200s': over TLS the host name may have at most 127 "
				  "characters (libwebsockets checks the certificate against that many)", url);
	/*
	 * libwebsockets cuts the name it verifies the certificate against at its
	 * first ':', so an IPv6 literal would be checked against "" (no check at
	 * all) or a fragment: over TLS, name the coordinator by a host name or an
	 * IPv4 address.
	 */
	if (*tls && strchr(host, ':'))
		return rs_err_set(err, RS_EINVAL, "coordinator URL '%.200s': wss:// with an IPv6 address cannot have its "
				  "certificate's name checked; use a host name or an IPv4 address", url);
	return RS_OK;
}

/*
 * A client connection to url with subprotocol `protocol` on `path`; *out
 * once the connection attempt is under way. guarded: a control connection,
 * held to the handshake's rules until the coordinator proves itself.
 */
static rs_status open_client(const char *url, const char *protocol, const char *path, const char *bearer, int guarded,
			     rs_control **out, rs_err *err)
{
	char host[256];
	int port, tls;
	*out = NULL;
	RSCHECK(parse_url(url, host, &port, &tls, err));
	rs_control *c = calloc(1, sizeof(*c));
	if (!c)
		return RS_ENOMEM;
	if (bearer && *bearer)
		snprintf(c->bearer, sizeof(c->bearer), "Bearer %s", bearer);
	rs_wsmsg_init(&c->io, guarded ? HANDSHAKE_MAX_MESSAGE : CONTROL_MAX_MESSAGE, CONTROL_MAX_QUEUED);
	c->guarded = guarded;
	rs_ws_clear_error();
	rs_ws_log_init();
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	info.user = c;
	if (tls) {
		/* the server's certificate and host name are verified (lws's default): by --tls-ca, else the system's CAs */
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.client_ssl_ca_filepath = tls_ca[0] ? tls_ca : NULL;
	}
	c->ctx = lws_create_context(&info);
	if (!c->ctx) {
		rs_control_close(c);
		return rs_err_set(err, RS_ELWS, "control: cannot create the client context");
	}
	struct lws_client_connect_info ci;
	memset(&ci, 0, sizeof(ci));
	ci.context = c->ctx;
	ci.address = host;
	ci.port = port;
	ci.path = path;
	ci.host = host;
	ci.protocol = protocol; /* no Origin: the coordinator refuses upgrades from web pages */
	ci.ssl_connection = tls ? LCCSCF_USE_SSL : 0;
	ci.pwsi = &c->wsi;
	ci.retry_and_idle_policy = rs_ws_idle_policy(); /* the connection's idle check (lws keeps the pointer) */
	if (!lws_client_connect_via_info(&ci)) {
		rs_control_close(c);
		return rs_err_set(err, RS_ELWS, "control: cannot start connecting to %s", url);
	}
	*out = c;
	return RS_OK;
}

/*
 * Whether a coordinator has ever proved itself to this process: until then a
 * refusal is taken at its word (a worker with a wrong token should stop at
 * once); after that, a refusal without the coordinator's proof is an
 * impostor's (a listener squatting on a restarting coordinator's port), and
 * only delays the rejoin.
 */
static atomic_int proven_once;

/*
 * The highest term of a coordinator this process joined: a coordinator of
 * a lower one was deposed (its successor took the state over) and is not
 * rejoined, though it may still run and answer on its old address.
 */
static atomic_llong highest_term;

/* The joiner's half of the handshake on c (see proto.h). */
static rs_status handshake(rs_control *c, const char *url, const char *token, const char *worker, const char *addr,
			   const char *model, int timeout_ms, rs_err *err)
{
	json_t *challenge = NULL, *join = NULL, *reply = NULL;
	const char *snonce, *epoch_only;
	char nonce[RS_AUTH_NONCE_HEX + 1], proof[RS_AUTH_PROOF_HEX + 1], epoch[RS_AUTH_NONCE_HEX + 32];
	int64_t term = 0;
	rs_msg_join jm = {.worker = worker, .addr = addr, .pid = getpid(), .protocol = RS_PROTOCOL_VERSION,
			  .incarnation = incarnation(), .model = model ? model : "", .nonce = nonce, .proof = proof};
	rs_msg_reply r;
	rs_err perr = {0};
	rs_status st = RS_OK;
	int64_t deadline = rs_now_ms() + timeout_ms;
	RSCHECKGOTO(rs_control_recv(c, timeout_ms, &challenge), st, unreachable);
	if (rs_proto_challenge(challenge, &snonce, &epoch_only, &term, &perr) != RS_OK)
		RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "control: %s is not a rowshift coordinator (%s)", url, perr.msg), out);
	rs_proto_bound_epoch(epoch_only, term, epoch, sizeof(epoch));
	if (rs_auth_nonce(nonce) != RS_OK || rs_proto_join_proof(token, snonce, epoch, &jm, proof) != RS_OK)
		RSFAILGOTO(st, rs_err_set(err, RS_ESYS, "control: cannot draw a nonce or make a proof"), out);
	RSALLOCGOTO(join = rs_proto_make_join(&jm), st, out);
	answer_check check = {token, snonce, epoch, &jm};
	c->check = &check; /* the answer is checked as it arrives: a proven welcome lifts the guard before more comes */
	st = rs_control_send(c, join);
	int64_t left = deadline - rs_now_ms();
	if (st == RS_OK)
		st = rs_control_recv(c, left > 0 ? (int)left : 0, &reply);
	c->check = NULL;
	if (st != RS_OK)
		goto unreachable;
	if (rs_proto_reply(reply, &r, &perr) != RS_OK || (r.type != RS_MSG_WELCOME && r.type != RS_MSG_REFUSED))
		RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "control: %s answered the join with %s", url,
					  perr.msg[0] ? perr.msg : rs_proto_type_name(r.type)), out);
	int proven = answer_proven(&check, reply);
	if (r.type == RS_MSG_WELCOME && proven && term < atomic_load(&highest_term))
		RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "control: %s is a deposed coordinator (term %lld; this worker "
					  "joined one of term %lld): not rejoining it", url, (long long)term,
					  (long long)atomic_load(&highest_term)), out);
	if (r.type == RS_MSG_WELCOME && proven) {
		atomic_store(&proven_once, 1);
		atomic_store(&highest_term, term);
		goto out;
	}
	if (r.type == RS_MSG_WELCOME)
		RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "control: %s welcomed the join without proving it holds the join "
					  "token: not the coordinator", url), out);
	if (proven || !atomic_load(&proven_once))
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "control: %s refused the join: %s", url, r.reason), out);
	RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "control: %s refused the join (%s) without proving it holds the join "
				  "token: an impostor, or not the coordinator", url, r.reason), out);
unreachable:
	/*
	 * A certificate that does not check out: before any coordinator proved
	 * itself, a set-up error that trying again will not mend (refused for
	 * good); after, an impostor on the port, like an unproven refusal.
	 */
	if (c->untrusted)
		st = atomic_load(&proven_once) ? RS_EPEER : RS_EINVAL;
	rs_err_set(err, st, "control: joining %s: %s", url, c->why[0] ? c->why : rs_status_str(st));
out:
	json_decref(challenge);
	json_decref(join);
	json_decref(reply);
	return st;
}

rs_status rs_control_connect(const char *url, const char *token, const char *worker, const char *addr,
			     const char *model, int timeout_ms, rs_control **out, rs_err *err)
{
	rs_control *c;
	*out = NULL;
	RSCHECK(open_client(url, "rowshift-control", "/", NULL, 1, &c, err));
	rs_status st = handshake(c, url, token, worker, addr, model, timeout_ms, err);
	if (st != RS_OK) {
		rs_control_close(c);
		return st;
	}
	*out = c;
	return RS_OK;
}

rs_status rs_control_open_status(const char *url, const char *token, int timeout_ms, rs_control **out, rs_err *err)
{
	rs_control *c;
	*out = NULL;
	RSCHECK(open_client(url, "rowshift-status", "/status", token, 0, &c, err));
	for (int64_t deadline = rs_now_ms() + timeout_ms; !c->connected;) {
		if (c->closed || rs_now_ms() >= deadline) {
			rs_status st = c->closed ? RS_EPEER : RS_ETIMEDOUT;
			rs_err_set(err, st, "status: %s: %s", url, c->why[0] ? c->why : "no answer");
			rs_control_close(c);
			return st;
		}
		rs_ws_service(c->ctx, 50);
	}
	*out = c;
	return RS_OK;
}

void rs_control_close(rs_control *c)
{
	if (!c)
		return;
	if (c->ctx)
		lws_context_destroy(c->ctx);
	while (c->head) {
		inbox *b = c->head;
		c->head = b->next;
		json_decref(b->msg);
		free(b);
	}
	rs_wsmsg_free(&c->io);
	free(c);
}
