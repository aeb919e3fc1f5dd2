/*
 * server_status.c - the coordinator's status stream (see server.h): its
 * clients, the messages they share and the snapshots they start from.
 */
#include "coordinator/server_internal.h"
#include "common/clock.h"

#include <stdlib.h>
#include <string.h>

static shared_msg *shared_new(const json_t *j)
{
	char *text = json_dumps(j, JSON_COMPACT);
	size_t len = text ? strlen(text) : 0;
	shared_msg *m = text ? malloc(sizeof(*m) + len) : NULL;
	if (m) {
		m->refs = 1;
		m->len = len;
		memcpy(m->text, text, len);
	}
	free(text);
	return m;
}

static void shared_unref(shared_msg *m)
{
	if (m && --m->refs == 0)
		free(m);
}

static void snapshot_drop(rs_server *s)
{
	shared_unref(s->snap);
	s->snap = NULL;
}

static void ring_clear(rs_server *s)
{
	for (; s->ring_n; s->ring_n--, s->ring_head = (s->ring_head + 1) % RS_STATUS_MAX_QUEUED)
		shared_unref(s->ring[s->ring_head]);
	s->ring_bytes = 0;
}

/* Keep m as the latest event (sequence number s->seq), forgetting the oldest beyond the bounds. */
static void ring_push(rs_server *s, shared_msg *m)
{
	if (m->len > RS_STATUS_MAX_BYTES) {
		ring_clear(s); /* no snapshot is bridged over this one: the next is built anew */
		return;
	}
	while (s->ring_n && (s->ring_n == RS_STATUS_MAX_QUEUED || s->ring_bytes + m->len > RS_STATUS_MAX_BYTES)) {
		s->ring_bytes -= s->ring[s->ring_head]->len;
		shared_unref(s->ring[s->ring_head]);
		s->ring_head = (s->ring_head + 1) % RS_STATUS_MAX_QUEUED;
		s->ring_n--;
	}
	m->refs++;
	s->ring[(s->ring_head + s->ring_n++) % RS_STATUS_MAX_QUEUED] = m;
	s->ring_bytes += m->len;
}

/*
 * The snapshot for a client that needs one (a new reference), and *seq,
 * the last event it includes. One serialized snapshot serves every client
 * for up to a second: a client that takes it later also gets the events
 * published since (status_next), kept for that in the ring. A snapshot is
 * rebuilt when older, or when the ring no longer holds every event since.
 */
static shared_msg *snapshot_get(rs_server *s, uint64_t *seq)
{
	double now = rs_now();
	if (s->snap && (now - s->snap_at >= 1.0 || s->seq - s->snap_seq > s->ring_n))
		snapshot_drop(s);
	if (!s->snap) {
		json_t *j = s->h.status_snapshot ? s->h.status_snapshot(s->h.ctx) : NULL;
		s->snap = j ? shared_new(j) : NULL;
		json_decref(j);
		if (!s->snap)
			return NULL;
		s->snap_seq = s->seq;
		s->snap_at = now;
		s->snapshots++;
	}
	s->snap->refs++;
	*seq = s->snap_seq;
	return s->snap;
}

/* c has something to write: ask lws to say when it may, unless the stream is held (and c not flushing). */
static void client_wake(status_client *c)
{
	if (!c->srv->held || c->flushing)
		lws_callback_on_writable(c->wsi);
}

static void client_drop_queue(status_client *c)
{
	for (; c->n; c->n--, c->head = (c->head + 1) % RS_STATUS_MAX_QUEUED)
		shared_unref(c->q[c->head]);
	c->bytes = 0;
}

/*
 * Queue m to c (a reference: every client shares the one copy), or when c
 * is too far behind, drop its queue: it gets the snapshot of the moment when
 * it drains, not what it missed.
 */
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
	client_wake(c);
}

/* Take c's next message into c->cur: the snapshot (then the events since it) when it needs one, else its queue's head. */
static int client_next(status_client *c)
{
	rs_server *s = c->srv;
	if (c->needs_snapshot) {
		uint64_t seq;
		c->needs_snapshot = 0;
		c->cur = snapshot_get(s, &seq);
		for (uint64_t k = s->ring_n - (s->seq - seq); c->cur && k < s->ring_n; k++)
			client_push(c, s->ring[(s->ring_head + k) % RS_STATUS_MAX_QUEUED]);
	}
	if (!c->cur && c->n) {
		c->cur = c->q[c->head];
		c->head = (c->head + 1) % RS_STATUS_MAX_QUEUED;
		c->n--;
		c->bytes -= c->cur->len;
	}
	c->off = 0;
	if (c->cur) /* a client that takes no message in that long is gone, or not reading: it holds memory */
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, RS_STATUS_STALL_S);
	return c->cur != NULL;
}

/*
 * c is writable: the next fragment of its message. Fragments are copied
 * from the shared message one at a time, and nothing is handed to lws while
 * the socket is choked, so a client that does not read holds a fragment at
 * most, never a copy of its own of a snapshot.
 */
static int client_write(status_client *c)
{
	rs_server *s = c->srv;
	if (lws_send_pipe_choked(c->wsi)) {
		lws_callback_on_writable(c->wsi);
		return 0;
	}
	if (!c->cur && !client_next(c)) {
		c->flushing = 0;
		return 0;
	}
	size_t left = c->cur->len - c->off, n = left < RS_STATUS_FRAGMENT ? left : RS_STATUS_FRAGMENT;
	memcpy(s->frag + LWS_PRE, c->cur->text + c->off, n);
	int flags = lws_write_ws_flags(LWS_WRITE_TEXT, c->off == 0, n == left);
	if (lws_write(c->wsi, s->frag + LWS_PRE, n, (enum lws_write_protocol)flags) < 0)
		return -1;
	c->off += n;
	if (c->off == c->cur->len) {
		shared_unref(c->cur);
		c->cur = NULL;
		lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
	}
	if (c->cur)
		lws_callback_on_writable(c->wsi); /* the message begun goes out whole, held or not */
	else if (c->n || c->needs_snapshot)
		client_wake(c);
	else
		c->flushing = 0;
	return 0;
}

/* Every client with something to write writes it all, held or not. */
static void flush_all(rs_server *s)
{
	for (status_client *c = s->clients; c; c = c->next)
		if (c->cur || c->n || c->needs_snapshot) {
			c->flushing = 1;
			lws_callback_on_writable(c->wsi);
		}
}

void rs_server_status_hold(rs_server *s, int hold)
{
	if (!s || !hold == !s->held)
		return;
	s->held = hold;
	s->held_at = rs_now();
	if (!hold) {
		flush_all(s);
		return;
	}
	for (status_client *c = s->clients; c; c = c->next)
		c->flushing = 0; /* one still behind from the last release waits like the rest */
}

void rs__status_tick(rs_server *s)
{
	if (s->held && rs_now() - s->held_at >= RS_STATUS_HOLD_MAX_S) {
		flush_all(s);
		s->held_at = rs_now();
	}
}

/* Whether another status client from peer may come: RS_STATUS_MAX_CLIENTS in all, RS_STATUS_MAX_PER_PEER from one address. */
static int status_room(rs_server *s, const char *peer)
{
	if (s->nclients >= RS_STATUS_MAX_CLIENTS) {
		rs__server_refusal(s, "status: refused a client from %s: %d clients already", peer, s->nclients);
		return 0;
	}
	if (rs__server_loopback(peer))
		return 1;
	int same = 0;
	for (status_client *o = s->clients; o; o = o->next)
		same += !strcmp(o->peer, peer);
	if (same >= RS_STATUS_MAX_PER_PEER) {
		rs__server_refusal(s, "status: refused a client from %s: %d clients from there already", peer, same);
		return 0;
	}
	return 1;
}

/*
 * Whether a request presents the status token: as "Authorization: Bearer
 * TOKEN" (rowshiftctl, curl, Prometheus) or, for a browser's WebSocket
 * (which cannot set headers), as a second subprotocol
 * "bearer.BASE64URL(TOKEN)" (the dashboard). Never in the URL, which ends
 * up in logs and histories.
 */
int rs__status_authorized(rs_server *s, struct lws *wsi)
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

int rs__status_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	status_client *c = user;
	rs_server *s = lws_context_user(lws_get_context(wsi));
	char peer[RS__PEER_LEN];
	(void)in;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (!rs__server_origin_allowed(s, wsi))
			return -1;
		rs__server_peer(wsi, peer);
		if (!rs__status_authorized(s, wsi)) {
			rs__server_refusal(s, "status: refused a client from %s without the status token", peer);
			return -1;
		}
		return status_room(s, peer) ? 0 : -1;
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->srv = s;
		c->wsi = wsi;
		rs__server_peer(wsi, c->peer);
		c->needs_snapshot = 1;
		c->next = s->clients;
		if (s->clients)
			s->clients->prev = c;
		s->clients = c;
		s->nclients++;
		client_wake(c); /* held: its snapshot too waits for the release */
		break;
	case LWS_CALLBACK_RECEIVE:
		/* read-only: what a client says is ignored, but it may not say much */
		c->rx = lws_is_first_fragment(wsi) ? len : c->rx + len;
		if (c->rx > RS_STATUS_MAX_INCOMING) {
			rs__server_refusal(s, "status: closed a client from %s that sent a message over %d bytes", c->peer,
				RS_STATUS_MAX_INCOMING);
			return -1;
		}
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return client_write(c);
	case LWS_CALLBACK_CLOSED:
		if (!c->srv)
			break;
		client_drop_queue(c);
		shared_unref(c->cur);
		c->cur = NULL;
		if (c->prev)
			c->prev->next = c->next;
		else if (s->clients == c)
			s->clients = c->next;
		if (c->next)
			c->next->prev = c->prev;
		c->prev = c->next = NULL;
		c->srv = NULL;
		s->nclients--;
		break;
	default:
		break;
	}
	return 0;
}

void rs_server_publish(rs_server *s, const json_t *event)
{
	if (!s)
		return;
	if (!s->clients) { /* nobody to bridge a snapshot for: the next client gets a fresh one */
		snapshot_drop(s);
		ring_clear(s);
		return;
	}
	shared_msg *m = shared_new(event);
	if (!m) {
		/* out of memory: everyone starts over from a fresh snapshot */
		snapshot_drop(s);
		ring_clear(s);
		for (status_client *c = s->clients; c; c = c->next) {
			client_drop_queue(c);
			c->needs_snapshot = 1;
			client_wake(c);
		}
		return;
	}
	s->seq++;
	ring_push(s, m);
	for (status_client *c = s->clients; c; c = c->next)
		client_push(c, m);
	shared_unref(m);
}

int rs_server_status_clients(const rs_server *s) { return s->nclients; }

size_t rs_server_status_queued(const rs_server *s)
{
	size_t total = 0;
	for (const status_client *c = s->clients; c; c = c->next)
		total += c->bytes + (c->cur ? c->cur->len - c->off : 0);
	return total;
}

unsigned long rs_server_snapshots_built(const rs_server *s) { return s->snapshots; }

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

void rs__status_free(rs_server *s)
{
	snapshot_drop(s);
	ring_clear(s);
}
