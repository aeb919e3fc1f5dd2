/*
 * transport_tcp.c - see transport_tcp.h.
 */
#include "worker/transport_tcp_internal.h"
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
#define PROTO_VERSION 2u
#define MAX_TOKEN 1024
#define MAX_PENDING 256             /* connections accepted and still in their handshake */
#define ACCEPT_BATCH (MAX_PENDING / 4) /* accepted between two polls; the newest this many are never dropped */
#define HELLO_MS 500                /* how long one of them may take to say hello, at most */
#define HANDSHAKE_MS 5000           /* and then to finish the handshake, at most (see handshake_ms) */
#define CONNECT_MS 2000             /* one connection attempt unanswered this long: a fresh one */
#define LISTEN_BACKLOG 4096         /* the kernel caps it at net.core.somaxconn */

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

static rs_status set_nonblocking(int fd)
{
	int fl;
	SYSCHECK(fl = fcntl(fd, F_GETFL));
	SYSCHECK(fcntl(fd, F_SETFL, fl | O_NONBLOCK));
	return RS_OK;
}

static void tune_socket(int fd)
{
	int one = 1;
	/* best effort: a socket without it still works, only slower. Buffers: the kernel's autotuning (fixed at 4
	 * MiB, they held point-to-point on loopback to 0.69-0.76 of a plain socket's rate here, 0.79-0.96 without) */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
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
	SYSCHECKGOTO(listen(fd, LISTEN_BACKLOG), st, out);
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

/* Wait for events on fd (fd < 0: only wait): RS_OK, RS_ETIMEDOUT at the deadline, RS_EABORTED, RS_ESYS. */
static rs_status wait_ready(tcp *t, int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = t->wake[0], .events = POLLIN}, {.fd = fd, .events = events}};
		int rc = poll(p, 2, rs__tcp_left_ms(deadline));
		if (atomic_load(&t->aborted))
			return RS_EABORTED;
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return RS_ESYS;
		return rc == 0 ? RS_ETIMEDOUT : RS_OK;
	}
}

/* Write or read exactly len bytes on a non-blocking socket, bounded by deadline and abort. */
static rs_status io_full(tcp *t, int fd, void *buf, size_t len, int writing, int64_t deadline)
{
	size_t done = 0;
	while (done < len) {
		RSCHECK(wait_ready(t, fd, writing ? POLLOUT : POLLIN, deadline));
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

/* And to say hello. */
static int hello_ms(const rs_tcp_config *cfg) { return handshake_ms(cfg) < HELLO_MS ? handshake_ms(cfg) : HELLO_MS; }

/*
 * The connector's side of the handshake with rank j on fd. RS_EPEER with *why
 * when it fails, and *final when the listener answered but is not the peer: a
 * fresh connection would not help, as it may when the listener closed on us.
 */
static rs_status introduce(tcp *t, const rs_tcp_config *cfg, int fd, int32_t j, int64_t deadline, const char **why,
			   int *final)
{
	hello h = {HELLO_MAGIC, PROTO_VERSION, cfg->generation, cfg->rank, cfg->world, {0}};
	challenge c;
	answer a = {ANSWER_MAGIC, 0, {0}};
	char nonce[RS_AUTH_NONCE_HEX + 1], want[RS_AUTH_PROOF_HEX + 1], mine[RS_AUTH_PROOF_HEX + 1];
	uint32_t ack[2];
	*why = "closed during the handshake (wrong generation or join token?)";
	*final = 0;
	RSCHECK(rs_auth_nonce(nonce));
	memcpy(h.nonce, nonce, RS_AUTH_NONCE_HEX);
	RSCHECK(io_full(t, fd, &h, sizeof(h), 1, deadline));
	RSCHECK(io_full(t, fd, &c, sizeof(c), 0, deadline));
	*final = 1;
	if (c.magic != CHALLENGE_MAGIC || c.rank != j) {
		*why = "not the expected peer";
		return RS_EPEER;
	}
	if (mesh_proof(cfg, "listener", cfg->rank, j, nonce, c.nonce, want) != RS_OK || !proof_matches(c.proof, want)) {
		*why = "it did not prove it holds the join token";
		return RS_EPEER;
	}
	*final = 0;
	RSCHECK(mesh_proof(cfg, "connector", cfg->rank, j, nonce, c.nonce, mine));
	memcpy(a.proof, mine, RS_AUTH_PROOF_HEX);
	RSCHECK(io_full(t, fd, &a, sizeof(a), 1, deadline));
	RSCHECK(io_full(t, fd, ack, sizeof(ack), 0, deadline));
	if (ack[0] == ACK_MAGIC && (int32_t)ack[1] == j)
		return RS_OK;
	*why = "not the expected peer", *final = 1;
	return RS_EPEER;
}

/*
 * One non-blocking connection attempt, until the deadline: a connected socket
 * in *fd_out; RS_EPEER when it failed (*eno: refused, unreachable, ...), worth
 * another; RS_ETIMEDOUT, RS_EABORTED, RS_ESYS.
 */
static rs_status connect_once(tcp *t, const struct addrinfo *ai, int64_t deadline, int *fd_out, int *eno)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*eno = errno;
		return RS_ESYS;
	}
	rs_status st = RS_OK;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		int e = errno;
		socklen_t el = sizeof(e);
		if (e != EINPROGRESS && e != EINTR)
			*eno = e, st = RS_EPEER;
		else if ((st = wait_ready(t, fd, POLLOUT, deadline)) != RS_OK)
			*eno = 0;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
			*eno = errno, st = RS_ESYS;
		else if (e != 0)
			*eno = e, st = RS_EPEER;
	}
	if (st == RS_OK)
		*fd_out = fd;
	else
		close(fd);
	return st;
}

/*
 * Connect to peer j and prove ourselves. Starts afresh, until the deadline,
 * while j is not up yet, does not answer a connection attempt within
 * CONNECT_MS, or closes the handshake (a listener drops connections when it
 * has too many in their handshake); every wait also ends on an abort.
 */
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
	int last_errno = 0, final = 0, pause_ms = 20;
	while (rs__tcp_left_ms(deadline) > 0) {
		int64_t now = rs_now_ms();
		int fd = -1;
		st = connect_once(t, ai, now + CONNECT_MS < deadline ? now + CONNECT_MS : deadline, &fd, &last_errno);
		if (st != RS_OK)
			why = NULL;
		if (st == RS_ETIMEDOUT) { /* no answer to this attempt (its SYN dropped?): a fresh one */
			last_errno = ETIMEDOUT;
			continue;
		}
		if (st == RS_OK) {
			last_errno = 0;
			tune_socket(fd);
			if ((st = introduce(t, cfg, fd, j, deadline, &why, &final)) == RS_OK) {
				t->fd[j] = fd;
				break;
			}
			close(fd);
			if (st == RS_EPEER && !final)
				RS_DEBUG("transport: rank %d: rank %d %s; trying again", cfg->rank, j, why);
		}
		if (st != RS_EPEER || final)
			break; /* timed out, aborted, a failed call, or a listener that is not the peer */
		now = rs_now_ms();
		st = wait_ready(t, -1, 0, now + pause_ms < deadline ? now + pause_ms : deadline);
		if (st != RS_ETIMEDOUT)
			break;
		pause_ms = pause_ms * 2 < 500 ? pause_ms * 2 : 500;
	}
	freeaddrinfo(ai);
	if (st == RS_OK)
		return RS_OK;
	return rs_err_set(err, st, "transport: rank %d could not join rank %d at %s: %s%s%s%s%s", cfg->rank, j,
			  cfg->addrs[j], st == RS_EPEER && why ? why : rs_status_str(st),
			  st != RS_EPEER && why ? "; the last attempt: " : "", st != RS_EPEER && why ? why : "",
			  last_errno ? ", last error: " : "", last_errno ? strerror(last_errno) : "");
}

/* One accepted connection in its handshake (the listener's side), driven without blocking. */
typedef struct pending {
	int fd;
	uint64_t seq;             /* how many connections were accepted before it */
	int64_t deadline;         /* for its hello, then for the rest of its handshake */
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
			p->deadline = rs_now_ms() + handshake_ms(cfg); /* said hello: the rest of the handshake */
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
 * The listener's side of the set-up (accept_peers). An accepted connection
 * must say hello within HELLO_MS and finish its handshake within
 * HANDSHAKE_MS of that; at most MAX_PENDING are in their handshake at once.
 * The listener never stops accepting, so its backlog drains: when the table
 * is full, a new connection takes the place of the least promising one
 * (victim()), and a real peer that lost its place connects again
 * (connect_peer). Refusals are logged at most once a second.
 */
typedef struct listener {
	tcp *t;
	const rs_tcp_config *cfg;
	pending *pend;            /* MAX_PENDING entries, np in use */
	int np;
	int32_t missing;          /* higher ranks not connected yet */
	uint64_t accepted;        /* connections accepted so far */
	long refused;             /* connections refused since the last warning */
	int64_t next_warn;        /* refusals are logged at most once a second */
	const char *why;          /* the last refusal's reason (a literal), or NULL */
} listener;

/* Close pend[k] (which then holds another entry) for why (a literal); k < 0: only log what is not logged yet. */
static void refuse(listener *l, int k, const char *why)
{
	int64_t now = rs_now_ms();
	if (k >= 0) {
		close(l->pend[k].fd);
		l->pend[k] = l->pend[--l->np];
		l->refused++, l->why = why;
	}
	if (l->refused > 0 && (k < 0 || now >= l->next_warn)) {
		RS_WARN("transport: rank %d refused %ld connection(s), the last: %s", l->cfg->rank, l->refused, l->why);
		l->refused = 0, l->next_warn = now + 1000;
	}
}

/*
 * The entry to drop for a new connection: never one of the newest
 * ACCEPT_BATCH accepted while there are others (so each is polled at least
 * once); among the others, one that has not said hello before one that has,
 * the oldest first. -1 when there is none.
 */
static int victim(const listener *l)
{
	int best = -1, protect = l->np > ACCEPT_BATCH;
	uint64_t best_key = 0;
	for (int k = 0; k < l->np; k++) {
		const pending *p = &l->pend[k];
		uint64_t key = (uint64_t)(p->stage > 0) << 63 | p->seq;
		if (protect && p->seq + ACCEPT_BATCH >= l->accepted)
			continue;
		if (best < 0 || key < best_key)
			best = k, best_key = key;
	}
	return best;
}

/* Move pend[k] on when its socket is ready, or drop it past its deadline (pend[k] then holds another entry). */
static void progress(listener *l, int k, int ready, int64_t now)
{
	pending *p = &l->pend[k];
	const char *why = NULL;
	int done = ready ? advance(l->t, l->cfg, p, &why) : 0;
	if (done == 0 && now >= p->deadline)
		done = -1, why = p->stage ? "no handshake in time" : "no hello in time";
	if (done == 1 && l->t->fd[p->h.rank] >= 0)
		done = -1, why = "a second connection from one rank";
	if (done < 0) {
		refuse(l, k, why);
	} else if (done > 0) {
		l->t->fd[p->h.rank] = p->fd;
		l->missing--;
		l->pend[k] = l->pend[--l->np];
	}
}

/* Accept what waits on lfd (at most ACCEPT_BATCH), each new connection taking the place of victim() when the table is full. */
static void accept_new(listener *l, int lfd)
{
	for (int n = 0; n < ACCEPT_BATCH; n++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), e = errno;
		if (fd < 0 && (e == EAGAIN || e == EWOULDBLOCK))
			return;
		if (fd < 0 && (e == ECONNABORTED || e == EINTR || e == EPROTO))
			continue; /* that one is gone: the next */
		if (fd < 0 && l->np > 0 && (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)) {
			refuse(l, victim(l), "dropped for a newer one: out of descriptors");
			continue;
		}
		if (fd < 0) {
			RS_WARN("transport: rank %d cannot accept: %s", l->cfg->rank, strerror(e));
			rs_sleep(0.05); /* never spin on the waiting connection */
			return;
		}
		tune_socket(fd);
		if (l->np == MAX_PENDING)
			refuse(l, victim(l), "dropped for a newer one: too many connections in their handshake");
		int k = l->np++;
		int64_t now = rs_now_ms();
		l->pend[k] = (pending){.fd = fd, .seq = l->accepted++, .deadline = now + hello_ms(l->cfg)};
		progress(l, k, 1, now); /* its hello is often there already */
	}
}

/* Accept every higher rank, until the mesh's deadline; idle or hostile connections never delay them. */
static rs_status accept_peers(tcp *t, const rs_tcp_config *cfg, int lfd, int64_t deadline, rs_err *err)
{
	listener l = {.t = t, .cfg = cfg, .missing = cfg->world - 1 - cfg->rank};
	struct pollfd *pfd = calloc(MAX_PENDING + 2, sizeof(*pfd));
	rs_status st = RS_OK;
	l.pend = calloc(MAX_PENDING, sizeof(*l.pend));
	RSALLOCGOTO(pfd, st, out);
	RSALLOCGOTO(l.pend, st, out);
	RSCHECKGOTO(set_nonblocking(lfd), st, out);
	while (l.missing > 0) {
		int64_t now = rs_now_ms(), wake = deadline;
		if (now >= deadline || atomic_load(&t->aborted)) {
			int32_t first = -1;
			for (int32_t j = cfg->rank + 1; j < cfg->world && first < 0; j++)
				if (t->fd[j] < 0)
					first = j;
			RSFAILGOTO(st, rs_err_set(err, atomic_load(&t->aborted) ? RS_EABORTED : RS_ETIMEDOUT,
						  "transport: rank %d timed out waiting for %d peer(s), first rank %d%s%s",
						  cfg->rank, l.missing, first, l.why ? "; refused a connection: " : "",
						  l.why ? l.why : ""), out);
		}
		/* pfd[0] the listener, pfd[1] the abort pipe, pfd[k + 2] pend[k] */
		pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = t->wake[0], .events = POLLIN};
		for (int k = 0; k < l.np; k++) {
			pfd[k + 2] = (struct pollfd){.fd = l.pend[k].fd, .events = l.pend[k].stage % 2 ? POLLOUT : POLLIN};
			wake = l.pend[k].deadline < wake ? l.pend[k].deadline : wake;
		}
		int64_t until = wake < now + 20 ? now + 20 : wake > now + 1000 ? now + 1000 : wake;
		int rc = poll(pfd, (nfds_t)l.np + 2, rs__tcp_left_ms(until));
		if (rc < 0 && errno != EINTR)
			RSFAILGOTO(st, rs_err_set(err, RS_ESYS, "transport: poll: %s", strerror(errno)), out);
		now = rs_now_ms();
		for (int k = l.np - 1; k >= 0; k--) /* an entry removed takes the last one, already seen */
			progress(&l, k, rc > 0 && pfd[k + 2].revents, now);
		if (rc > 0 && pfd[0].revents)
			accept_new(&l, lfd);
	}
out:
	if (l.pend)
		refuse(&l, -1, NULL);
	for (int k = 0; l.pend && k < l.np; k++)
		close(l.pend[k].fd);
	free(l.pend);
	free(pfd);
	return st;
}

/* This rank's waits end at once (the wake-up), and its peers' on it: the connections are shut down, not closed (a
 * thread may be inside poll or send on them). Both calls are async-signal-safe; a failure leaves nothing to do. */
static void tcp_abort(rs_transport *base)
{
	tcp *t = (tcp *)base;
	atomic_store(&t->aborted, 1);
	char c = 1;
	ssize_t n = write(t->wake[1], &c, 1); /* a full pipe is already a wake-up */
	(void)n;
	for (int32_t p = 0; t->fd && p < base->world; p++)
		if (t->fd[p] >= 0)
			(void)shutdown(t->fd[p], SHUT_RDWR);
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
	.exchange = rs__tcp_exchange,
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
	t->base = (rs_transport){.ops = &tcp_ops, .rank = base->rank, .world = n, .timeout_ms = base->timeout_ms};
	memcpy(t->fd, parent->fd, sizeof(int) * (size_t)n);
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
	t->base.timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
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
	int64_t deadline = rs_now_ms() + t->base.timeout_ms;
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
