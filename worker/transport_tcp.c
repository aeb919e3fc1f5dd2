/*
 * transport_tcp.c - see transport_tcp.h.
 */
#include "worker/transport_tcp.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x48545352u     /* "RSTH" */
#define CHALLENGE_MAGIC 0x43545352u /* "RSTC" */
#define ANSWER_MAGIC 0x50545352u    /* "RSTP" */
#define ACK_MAGIC 0x41545352u       /* "RSTA" */
#define FRAME_MAGIC 0x46545352u     /* "RSTF" */
#define PROTO_VERSION 2u
#define MAX_TOKEN 1024
#define SOCKET_BUFFER (4 << 20)
#define MAX_PENDING 256             /* connections accepted and still in their handshake */
#define HANDSHAKE_MS 5000           /* how long one of them may take, at most (see handshake_ms) */

/*
 * The handshake, both sides proving they hold the join token (common/auth.h)
 * without sending it, bound to the generation, both ranks and both nonces:
 *   connector -> listener  hello      (generation, its rank, the world, its nonce)
 *   listener -> connector  challenge  (its rank, its nonce, its proof)
 *   connector -> listener  answer     (its proof)
 *   listener -> connector  ack
 */
typedef struct hello {
	uint32_t magic, version;
	uint64_t generation;
	int32_t rank, world;
	char nonce[RS_AUTH_NONCE_HEX];
} hello;

typedef struct challenge {
	uint32_t magic;
	int32_t rank;
	char nonce[RS_AUTH_NONCE_HEX];
	char proof[RS_AUTH_PROOF_HEX];
} challenge;

typedef struct answer {
	uint32_t magic, pad;
	char proof[RS_AUTH_PROOF_HEX];
} answer;

typedef struct frame {
	uint32_t magic, pad;
	uint64_t seq;
	uint64_t len;
} frame;

/* Progress of one direction of one exchange with one peer. */
typedef struct flow {
	const rs_xfer **msgs; /* this peer's messages, in posting order */
	int n, cur;
	frame hdr;            /* the header being sent or received */
	size_t hdr_done, body_done;
} flow;

typedef struct tcp {
	rs_transport base;
	int *fd;              /* per peer; -1 for self */
	int wake[2];          /* abort writes here to interrupt poll */
	atomic_int aborted;
	int broken;           /* a failed call leaves the mesh unusable */
	int timeout_ms;
	uint64_t seq;         /* exchanges so far: both ends count the same */
	int borrowed;         /* a subset view: the connections are its parent's */
} tcp;

static rs_status fail(tcp *t, rs_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static rs_status fail(tcp *t, rs_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->base.error, sizeof(t->base.error), fmt, ap);
	va_end(ap);
	t->broken = 1;
	return st;
}

static int left_ms(int64_t deadline)
{
	int64_t l = deadline - rs_now_ms();
	return l < 0 ? 0 : l > 1000000 ? 1000000 : (int)l;
}

static rs_status set_nonblocking(int fd)
{
	int fl;
	SYSCHECK(fl = fcntl(fd, F_GETFL));
	SYSCHECK(fcntl(fd, F_SETFL, fl | O_NONBLOCK));
	return RS_OK;
}

static void tune_socket(int fd)
{
	int one = 1, buf = SOCKET_BUFFER;
	/* best effort: a socket without these still works, only slower */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)) != 0)
		RS_DEBUG("setsockopt on fd %d: %s", fd, strerror(errno));
}

/* Split "host:port" or "[v6]:port". */
static rs_status split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || !colon[1])
		return RS_EINVAL;
	const char *h = addr, *he = colon;
	if (*h == '[') {
		if (he[-1] != ']')
			return RS_EINVAL;
		h++;
		he--;
	}
	if ((size_t)(he - h) >= hcap || strlen(colon + 1) >= pcap)
		return RS_EINVAL;
	memcpy(host, h, (size_t)(he - h));
	host[he - h] = 0;
	strcpy(port, colon + 1);
	return RS_OK;
}

rs_status rs_tcp_listen(const char *host, int port, int *fd_out, int *bound_port, rs_err *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	char ps[16];
	int fd = -1, one = 1, rc;
	rs_status st = RS_OK;

	snprintf(ps, sizeof(ps), "%d", port);
	if ((rc = getaddrinfo(host, ps, &hints, &ai)) != 0)
		return rs_err_set(err, RS_EINVAL, "listen on %s:%d: %s", host, port, gai_strerror(rc));
	SYSCHECKGOTO(fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), st, out);
	SYSCHECKGOTO(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), st, out);
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		st = rs_err_set(err, RS_ESYS, "bind %s:%d: %s", host, port, strerror(errno));
		goto out;
	}
	SYSCHECKGOTO(listen(fd, 256), st, out);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	SYSCHECKGOTO(getsockname(fd, (struct sockaddr *)&ss, &sl), st, out);
	*bound_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						   : ((struct sockaddr_in6 *)&ss)->sin6_port);
	*fd_out = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	if (st != RS_OK && err && !err->msg[0])
		rs_err_set(err, st, "listen on %s:%d: %s", host, port, strerror(errno));
	return st;
}

/* Write or read exactly len bytes on a blocking-mode exchange, bounded by deadline. */
static rs_status io_full(int fd, void *buf, size_t len, int writing, int64_t deadline)
{
	size_t done = 0;
	while (done < len) {
		struct pollfd p = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
		int rc = poll(&p, 1, left_ms(deadline));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return RS_ESYS;
		if (rc == 0)
			return RS_ETIMEDOUT;
		ssize_t n = writing ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
				    : recv(fd, (char *)buf + done, len - done, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0)
			return RS_EPEER;
		done += (size_t)n;
	}
	return RS_OK;
}

/*
 * The proof `side` ("listener" or "connector") gives for the connection
 * from rank rc to rank rl: bound to the generation, the world, both ranks
 * and both nonces (each RS_AUTH_NONCE_HEX bytes, not NUL-terminated).
 */
static rs_status mesh_proof(const rs_tcp_config *cfg, const char *side, int32_t rc, int32_t rl, const char *nonce_c,
			    const char *nonce_l, char out[RS_AUTH_PROOF_HEX + 1])
{
	char gen[24], world[16], crank[16], lrank[16], nc[RS_AUTH_NONCE_HEX + 1], nl[RS_AUTH_NONCE_HEX + 1];
	char label[48];
	snprintf(gen, sizeof(gen), "%llu", (unsigned long long)cfg->generation);
	snprintf(world, sizeof(world), "%d", cfg->world);
	snprintf(crank, sizeof(crank), "%d", rc);
	snprintf(lrank, sizeof(lrank), "%d", rl);
	memcpy(nc, nonce_c, RS_AUTH_NONCE_HEX), nc[RS_AUTH_NONCE_HEX] = 0;
	memcpy(nl, nonce_l, RS_AUTH_NONCE_HEX), nl[RS_AUTH_NONCE_HEX] = 0;
	snprintf(label, sizeof(label), "rowshift mesh %s", side);
	const char *parts[] = {gen, world, crank, lrank, nc, nl};
	return rs_auth_proof(cfg->token, label, parts, 6, out);
}

/* A proof received (RS_AUTH_PROOF_HEX bytes, not NUL-terminated) is the one expected, compared in constant time. */
static int proof_matches(const char *received, const char *expected)
{
	char r[RS_AUTH_PROOF_HEX + 1];
	memcpy(r, received, RS_AUTH_PROOF_HEX), r[RS_AUTH_PROOF_HEX] = 0;
	return expected[0] && rs_auth_equal(r, expected);
}

/* How long one accepted connection may take to prove itself. */
static int handshake_ms(const rs_tcp_config *cfg) { return cfg->timeout_ms > 0 && cfg->timeout_ms < HANDSHAKE_MS ? cfg->timeout_ms : HANDSHAKE_MS; }

/* The connector's side of the handshake with rank j on fd. RS_EPEER (with *why) when j does not prove itself. */
static rs_status introduce(const rs_tcp_config *cfg, int fd, int32_t j, int64_t deadline, const char **why)
{
	hello h = {HELLO_MAGIC, PROTO_VERSION, cfg->generation, cfg->rank, cfg->world, {0}};
	challenge c;
	answer a = {ANSWER_MAGIC, 0, {0}};
	char nonce[RS_AUTH_NONCE_HEX + 1], want[RS_AUTH_PROOF_HEX + 1], mine[RS_AUTH_PROOF_HEX + 1];
	uint32_t ack[2];
	*why = "closed during the handshake (wrong generation or join token?)";
	RSCHECK(rs_auth_nonce(nonce));
	memcpy(h.nonce, nonce, RS_AUTH_NONCE_HEX);
	RSCHECK(io_full(fd, &h, sizeof(h), 1, deadline));
	RSCHECK(io_full(fd, &c, sizeof(c), 0, deadline));
	if (c.magic != CHALLENGE_MAGIC || c.rank != j) {
		*why = "not the expected peer";
		return RS_EPEER;
	}
	if (mesh_proof(cfg, "listener", cfg->rank, j, nonce, c.nonce, want) != RS_OK || !proof_matches(c.proof, want)) {
		*why = "it did not prove it holds the join token";
		return RS_EPEER;
	}
	RSCHECK(mesh_proof(cfg, "connector", cfg->rank, j, nonce, c.nonce, mine));
	memcpy(a.proof, mine, RS_AUTH_PROOF_HEX);
	RSCHECK(io_full(fd, &a, sizeof(a), 1, deadline));
	RSCHECK(io_full(fd, ack, sizeof(ack), 0, deadline));
	return ack[0] == ACK_MAGIC && (int32_t)ack[1] == j ? RS_OK : RS_EPEER;
}

/* Connect to peer j and prove ourselves, retrying while it is not up yet. */
static rs_status connect_peer(tcp *t, const rs_tcp_config *cfg, int32_t j, int64_t deadline, rs_err *err)
{
	char host[256], port[16];
	const char *why = NULL;
	if (split_addr(cfg->addrs[j], host, sizeof(host), port, sizeof(port)) != RS_OK)
		return rs_err_set(err, RS_EINVAL, "transport: bad address '%s' for rank %d", cfg->addrs[j], j);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0)
		return rs_err_set(err, RS_EINVAL, "transport: rank %d at %s: %s", j, cfg->addrs[j], gai_strerror(rc));
	rs_status st = RS_ETIMEDOUT;
	int last_errno = 0;
	while (left_ms(deadline) > 0 && !atomic_load(&t->aborted)) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			st = RS_ESYS;
			last_errno = errno;
			break;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			last_errno = errno;
			close(fd);
			rs_sleep(0.02);
			continue;
		}
		tune_socket(fd);
		if ((st = introduce(cfg, fd, j, deadline, &why)) == RS_OK)
			t->fd[j] = fd;
		else
			close(fd); /* refused (closed on us), not the peer, or timed out */
		break;
	}
	freeaddrinfo(ai);
	if (st == RS_OK)
		return RS_OK;
	return rs_err_set(err, st, "transport: rank %d could not join rank %d at %s: %s%s%s", cfg->rank, j,
			  cfg->addrs[j], st == RS_EPEER && why ? why : rs_status_str(st),
			  last_errno ? ", last error: " : "", last_errno ? strerror(last_errno) : "");
}

/* One accepted connection in its handshake (the listener's side), driven without blocking. */
typedef struct pending {
	int fd;
	int64_t deadline;
	int stage;                /* 0 reading the hello, 1 writing the challenge, 2 reading the answer, 3 writing the ack */
	size_t done;              /* bytes of the stage's message so far */
	hello h;
	challenge c;
	answer a;
	uint32_t ack[2];
	char want[RS_AUTH_PROOF_HEX + 1]; /* the connector's proof, once the hello is known */
} pending;

static void *stage_buf(pending *p, size_t *len)
{
	void *bufs[4] = {&p->h, &p->c, &p->a, p->ack};
	size_t lens[4] = {sizeof(p->h), sizeof(p->c), sizeof(p->a), sizeof(p->ack)};
	*len = lens[p->stage];
	return bufs[p->stage];
}

/*
 * Move p's handshake on as far as its socket allows. Returns 1 when it is
 * complete (the peer is rank p->h.rank), 0 while it goes on, -1 when it
 * failed (*why says how).
 */
static int advance(tcp *t, const rs_tcp_config *cfg, pending *p, const char **why)
{
	for (;;) {
		size_t len;
		char *buf = stage_buf(p, &len);
		int writing = p->stage == 1 || p->stage == 3;
		ssize_t n = writing ? send(p->fd, buf + p->done, len - p->done, MSG_NOSIGNAL)
				    : recv(p->fd, buf + p->done, len - p->done, 0);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		if (n <= 0) {
			*why = "closed during the handshake";
			return -1;
		}
		if ((p->done += (size_t)n) < len)
			continue;
		p->done = 0;
		switch (p->stage) {
		case 0: {
			const hello *h = &p->h;
			char nonce[RS_AUTH_NONCE_HEX + 1];
			if (h->magic != HELLO_MAGIC || h->version != PROTO_VERSION)
				*why = "not a rowshift transport peer";
			else if (h->generation != cfg->generation)
				*why = "from another generation";
			else if (h->world != cfg->world || h->rank <= cfg->rank || h->rank >= cfg->world || t->fd[h->rank] >= 0)
				*why = "unexpected rank";
			else if (rs_auth_nonce(nonce) != RS_OK ||
				 mesh_proof(cfg, "listener", h->rank, cfg->rank, h->nonce, nonce, p->want) != RS_OK)
				*why = "cannot draw a nonce";
			else
				*why = NULL;
			if (*why)
				return -1;
			p->c.magic = CHALLENGE_MAGIC, p->c.rank = cfg->rank;
			memcpy(p->c.nonce, nonce, RS_AUTH_NONCE_HEX);
			memcpy(p->c.proof, p->want, RS_AUTH_PROOF_HEX);
			/* what the connector must answer */
			if (mesh_proof(cfg, "connector", h->rank, cfg->rank, h->nonce, nonce, p->want) != RS_OK) {
				*why = "cannot compute a proof";
				return -1;
			}
			break;
		}
		case 2:
			if (p->a.magic != ANSWER_MAGIC || !proof_matches(p->a.proof, p->want)) {
				*why = "wrong join token";
				return -1;
			}
			p->ack[0] = ACK_MAGIC, p->ack[1] = (uint32_t)cfg->rank;
			break;
		case 3:
			return 1;
		}
		p->stage++;
	}
}

/*
 * Accept every higher rank. Handshakes run side by side, without blocking,
 * each within its own short deadline: a connection that does not prove
 * itself in time (an idle or hostile one) is dropped and never delays the
 * real peers, which are waited for until the mesh's deadline.
 */
static rs_status accept_peers(tcp *t, const rs_tcp_config *cfg, int lfd, int64_t deadline, rs_err *err)
{
	int32_t missing = cfg->world - 1 - cfg->rank;
	char refused[160] = "";
	pending *pend = calloc(MAX_PENDING, sizeof(*pend));
	struct pollfd *pfd = calloc(MAX_PENDING + 1, sizeof(*pfd));
	int np = 0;
	rs_status st = RS_OK;
	RSALLOCGOTO(pend, st, out);
	RSALLOCGOTO(pfd, st, out);
	RSCHECKGOTO(set_nonblocking(lfd), st, out);
	while (missing > 0) {
		int64_t now = rs_now_ms(), wake = deadline;
		int n = 0;
		if (np < MAX_PENDING)
			pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
		for (int k = 0; k < np; k++) {
			pfd[n++] = (struct pollfd){.fd = pend[k].fd, .events = pend[k].stage % 2 ? POLLOUT : POLLIN};
			wake = pend[k].deadline < wake ? pend[k].deadline : wake;
		}
		if (now >= deadline || atomic_load(&t->aborted)) {
			int32_t first = -1;
			for (int32_t j = cfg->rank + 1; j < cfg->world && first < 0; j++)
				if (t->fd[j] < 0)
					first = j;
			RSFAILGOTO(st, rs_err_set(err, atomic_load(&t->aborted) ? RS_EABORTED : RS_ETIMEDOUT,
						  "transport: rank %d timed out waiting for %d peer(s), first rank %d%s%s",
						  cfg->rank, missing, first, refused[0] ? "; " : "", refused), out);
		}
		int rc = poll(pfd, (nfds_t)n, left_ms(wake < now + 100 ? now + 100 : wake > now + 1000 ? now + 1000 : wake));
		if (rc < 0 && errno != EINTR)
			RSFAILGOTO(st, rs_err_set(err, RS_ESYS, "transport: poll: %s", strerror(errno)), out);
		now = rs_now_ms();
		/* handshakes under way (pfd[k + off] belongs to pend[k]) */
		int off = np < MAX_PENDING ? 1 : 0;
		for (int k = np - 1; k >= 0; k--) {
			const char *why = NULL;
			int done = rc > 0 && pfd[k + off].revents ? advance(t, cfg, &pend[k], &why) : 0;
			if (done == 0 && now >= pend[k].deadline) {
				done = -1;
				why = "no handshake in time";
			}
			if (done == 1) {
				t->fd[pend[k].h.rank] = pend[k].fd;
				missing--;
			} else if (done < 0) {
				RS_WARN("transport: rank %d refused a connection: %s", cfg->rank, why);
				snprintf(refused, sizeof(refused), "refused a connection: %s", why);
				close(pend[k].fd);
			}
			if (done != 0)
				pend[k] = pend[--np];
		}
		/* new connections */
		while (np < MAX_PENDING) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
				RS_WARN("transport: rank %d cannot accept: %s", cfg->rank, strerror(errno));
				rs_sleep(0.05); /* out of descriptors: never spin on the waiting connection */
			}
			if (fd < 0)
				break;
			tune_socket(fd);
			pend[np++] = (pending){.fd = fd, .deadline = now + handshake_ms(cfg)};
		}
	}
out:
	for (int k = 0; pend && k < np; k++)
		close(pend[k].fd);
	free(pend);
	free(pfd);
	return st;
}

/* ---- the data path ------------------------------------------------------------ */

/* Send as much of the current messages as the socket takes. Returns RS_OK or a failure. */
static rs_status pump_send(tcp *t, int32_t p, flow *f)
{
	while (f->cur < f->n) {
		const rs_xfer *m = f->msgs[f->cur];
		if (f->hdr_done < sizeof(frame)) {
			f->hdr = (frame){FRAME_MAGIC, 0, t->seq, m->len};
			ssize_t n = send(t->fd[p], (char *)&f->hdr + f->hdr_done, sizeof(frame) - f->hdr_done, MSG_NOSIGNAL);
			if (n < 0)
				goto io_error;
			f->hdr_done += (size_t)n;
			continue;
		}
		if (f->body_done < m->len) {
			ssize_t n = send(t->fd[p], (char *)m->buf + f->body_done, m->len - f->body_done, MSG_NOSIGNAL);
			if (n < 0)
				goto io_error;
			f->body_done += (size_t)n;
			continue;
		}
		f->cur++;
		f->hdr_done = f->body_done = 0;
	}
	return RS_OK;
io_error:
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return RS_OK;
	return fail(t, RS_EPEER, "transport: rank %d: sending to rank %d: %s", t->base.rank, p, strerror(errno));
}

static rs_status pump_recv(tcp *t, int32_t p, flow *f)
{
	ssize_t n = 0;
	while (f->cur < f->n) {
		const rs_xfer *m = f->msgs[f->cur];
		if (f->hdr_done < sizeof(frame)) {
			n = recv(t->fd[p], (char *)&f->hdr + f->hdr_done, sizeof(frame) - f->hdr_done, 0);
			if (n <= 0)
				goto io_end;
			f->hdr_done += (size_t)n;
			if (f->hdr_done == sizeof(frame) &&
			    (f->hdr.magic != FRAME_MAGIC || f->hdr.seq != t->seq || f->hdr.len != m->len))
				return fail(t, RS_ECORRUPT,
					    "transport: rank %d: from rank %d: message of %llu bytes in exchange %llu, expected %zu bytes in exchange %llu",
					    t->base.rank, p, (unsigned long long)f->hdr.len, (unsigned long long)f->hdr.seq,
					    m->len, (unsigned long long)t->seq);
			continue;
		}
		if (f->body_done < m->len) {
			n = recv(t->fd[p], (char *)m->buf + f->body_done, m->len - f->body_done, 0);
			if (n <= 0)
				goto io_end;
			f->body_done += (size_t)n;
			continue;
		}
		f->cur++;
		f->hdr_done = f->body_done = 0;
	}
	return RS_OK;
io_end:
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return RS_OK;
	return fail(t, RS_EPEER, "transport: rank %d: rank %d %s%s", t->base.rank, p, n == 0 ? "" : "failed: ",
		    n == 0 ? "closed the connection (gone?)" : strerror(errno));
}

static rs_status tcp_exchange(rs_transport *base, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs)
{
	tcp *t = (tcp *)base;
	int32_t w = base->world, me = base->rank;
	rs_status st = RS_OK;

	if (atomic_load(&t->aborted))
		return fail(t, RS_EABORTED, "transport: aborted");
	if (t->broken)
		return RS_EABORTED;
	flow *out = calloc((size_t)w, sizeof(flow)), *in = calloc((size_t)w, sizeof(flow));
	const rs_xfer **slots = malloc(sizeof(rs_xfer *) * (size_t)(nsends + nrecvs + 1));
	struct pollfd *pfd = malloc(sizeof(struct pollfd) * (size_t)(w + 1));
	int32_t *pfd_peer = malloc(sizeof(int32_t) * (size_t)(w + 1));
	if (!out || !in || !slots || !pfd || !pfd_peer) {
		st = RS_ENOMEM;
		goto done;
	}
	/* group messages by peer, keeping posting order */
	const rs_xfer **next = slots;
	for (int32_t p = 0; p < w; p++) {
		out[p].msgs = next;
		for (int i = 0; i < nsends; i++)
			if (sends[i].peer == p)
				out[p].msgs[out[p].n++] = &sends[i];
		next += out[p].n;
		in[p].msgs = next;
		for (int i = 0; i < nrecvs; i++)
			if (recvs[i].peer == p)
				in[p].msgs[in[p].n++] = &recvs[i];
		next += in[p].n;
	}
	for (int i = 0; i < nsends + nrecvs; i++) {
		int32_t p = i < nsends ? sends[i].peer : recvs[i - nsends].peer;
		if (p < 0 || p >= w) {
			st = fail(t, RS_EINVAL, "transport: message for rank %d, world has %d", p, w);
			goto done;
		}
	}
	/* to self: copies, matched in order */
	if (out[me].n != in[me].n) {
		st = fail(t, RS_EINVAL, "transport: %d sends but %d receives to self", out[me].n, in[me].n);
		goto done;
	}
	for (int i = 0; i < out[me].n; i++) {
		if (out[me].msgs[i]->len != in[me].msgs[i]->len) {
			st = fail(t, RS_EINVAL, "transport: self message %d: %zu bytes sent, %zu expected", i,
				  out[me].msgs[i]->len, in[me].msgs[i]->len);
			goto done;
		}
		memmove(in[me].msgs[i]->buf, out[me].msgs[i]->buf, out[me].msgs[i]->len);
	}
	out[me].cur = out[me].n;
	in[me].cur = in[me].n;

	int64_t deadline = rs_now_ms() + t->timeout_ms;
	for (;;) {
		int np = 0;
		for (int32_t p = 0; p < w; p++) {
			short ev = (short)((out[p].cur < out[p].n ? POLLOUT : 0) | (in[p].cur < in[p].n ? POLLIN : 0));
			if (ev) {
				pfd[np] = (struct pollfd){.fd = t->fd[p], .events = ev};
				pfd_peer[np++] = p;
			}
		}
		if (np == 0)
			break;
		pfd[np] = (struct pollfd){.fd = t->wake[0], .events = POLLIN};
		int rc = poll(pfd, (nfds_t)np + 1, left_ms(deadline));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0) {
			st = fail(t, RS_ESYS, "transport: poll: %s", strerror(errno));
			goto done;
		}
		if (atomic_load(&t->aborted)) {
			st = fail(t, RS_EABORTED, "transport: aborted");
			goto done;
		}
		if (rc == 0) {
			st = fail(t, RS_ETIMEDOUT, "transport: rank %d: exchange %llu timed out after %d ms waiting for rank %d",
				  me, (unsigned long long)t->seq, t->timeout_ms, pfd_peer[0]);
			goto done;
		}
		for (int k = 0; k < np; k++) {
			int32_t p = pfd_peer[k];
			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
				RSCHECKGOTO(pump_recv(t, p, &in[p]), st, done);
			if (pfd[k].revents & (POLLOUT | POLLERR))
				RSCHECKGOTO(pump_send(t, p, &out[p]), st, done);
			if ((pfd[k].revents & (POLLHUP | POLLERR)) && in[p].cur == in[p].n && out[p].cur < out[p].n) {
				st = fail(t, RS_EPEER, "transport: rank %d: rank %d hung up", me, p);
				goto done;
			}
		}
	}
	t->seq++;
done:
	free(pfd_peer);
	free(pfd);
	free(slots);
	free(in);
	free(out);
	return st;
}

static void tcp_abort(rs_transport *base)
{
	tcp *t = (tcp *)base;
	atomic_store(&t->aborted, 1);
	char c = 1;
	ssize_t n = write(t->wake[1], &c, 1); /* async-signal-safe; a full pipe is already a wake-up */
	(void)n;
}

static void tcp_destroy(rs_transport *base)
{
	tcp *t = (tcp *)base;
	for (int32_t p = 0; t->fd && !t->borrowed && p < base->world; p++)
		if (t->fd[p] >= 0)
			close(t->fd[p]);
	if (t->wake[0] >= 0)
		close(t->wake[0]);
	if (t->wake[1] >= 0)
		close(t->wake[1]);
	free(t->fd);
	free(t);
}

static rs_status tcp_subset(rs_transport *base, int32_t n, rs_transport **out);

static const rs_transport_ops tcp_ops = {
	.name = "tcp",
	.exchange = tcp_exchange,
	.abort = tcp_abort,
	.destroy = tcp_destroy,
	.subset = tcp_subset,
};

static rs_status tcp_subset(rs_transport *base, int32_t n, rs_transport **out)
{
	tcp *parent = (tcp *)base, *t;
	*out = NULL;
	if (n < 1 || n > base->world || base->rank >= n)
		return RS_EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t || !(t->fd = malloc(sizeof(int) * (size_t)n))) {
		free(t);
		return RS_ENOMEM;
	}
	t->base = (rs_transport){.ops = &tcp_ops, .rank = base->rank, .world = n};
	memcpy(t->fd, parent->fd, sizeof(int) * (size_t)n);
	t->timeout_ms = parent->timeout_ms;
	t->borrowed = 1;
	t->wake[0] = t->wake[1] = -1;
	if (pipe2(t->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		free(t->fd);
		free(t);
		return RS_ESYS;
	}
	*out = &t->base;
	return RS_OK;
}

rs_status rs_tcp_transport_create(const rs_tcp_config *cfg, rs_transport **out, rs_err *err)
{
	rs_status st = RS_OK;
	int lfd = cfg->listen_fd;
	*out = NULL;
	if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || !cfg->addrs || !cfg->token ||
	    strlen(cfg->token) > MAX_TOKEN) {
		if (lfd >= 0)
			close(lfd);
		return rs_err_set(err, RS_EINVAL, "transport: bad config (rank %d of %d)", cfg->rank, cfg->world);
	}
	tcp *t = calloc(1, sizeof(*t));
	if (!t || !(t->fd = malloc(sizeof(int) * (size_t)cfg->world))) {
		free(t);
		if (lfd >= 0)
			close(lfd);
		return RS_ENOMEM;
	}
	t->base = (rs_transport){.ops = &tcp_ops, .rank = cfg->rank, .world = cfg->world};
	t->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
	t->wake[0] = t->wake[1] = -1;
	for (int32_t p = 0; p < cfg->world; p++)
		t->fd[p] = -1;
	SYSCHECKGOTO(pipe2(t->wake, O_CLOEXEC | O_NONBLOCK), st, fail_out);
	if (lfd < 0 && cfg->rank < cfg->world - 1) {
		char host[256], port[16];
		int bound;
		if (split_addr(cfg->addrs[cfg->rank], host, sizeof(host), port, sizeof(port)) != RS_OK) {
			st = rs_err_set(err, RS_EINVAL, "transport: bad address '%s'", cfg->addrs[cfg->rank]);
			goto fail_out;
		}
		RSCHECKGOTO(rs_tcp_listen(host, atoi(port), &lfd, &bound, err), st, fail_out);
	}
	int64_t deadline = rs_now_ms() + t->timeout_ms;
	for (int32_t j = 0; j < cfg->rank; j++)
		RSCHECKGOTO(connect_peer(t, cfg, j, deadline, err), st, fail_out);
	if (cfg->rank < cfg->world - 1)
		RSCHECKGOTO(accept_peers(t, cfg, lfd, deadline, err), st, fail_out);
	for (int32_t p = 0; p < cfg->world; p++)
		if (t->fd[p] >= 0)
			RSCHECKGOTO(set_nonblocking(t->fd[p]), st, fail_out);
	if (lfd >= 0)
		close(lfd);
	*out = &t->base;
	return RS_OK;
fail_out:
	if (lfd >= 0)
		close(lfd);
	tcp_destroy(&t->base);
	return st;
}
