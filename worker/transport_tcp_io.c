/*
 * transport_tcp_io.c - the TCP transport's data path (see transport_tcp.h):
 * every message framed with a sequence number and its length, over
 * non-blocking sockets driven by poll(); transport_tcp.c sets up the mesh.
 */
#include "worker/transport_tcp_internal.h"
#include "common/crc32c.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FRAME_MAGIC 0x46545352u /* "RSTF" */
/* a checksummed message moves in pieces of at most this, each hashed while in cache: a core's L2 here. Smaller
 * ones cost more calls (bench-1g's 2 -> 4 moved its 496 MiB in 0.13 s at 1-2 MiB, 0.14 at 256 KiB, 0.17 at 64) */
#define CRC_PIECE (1u << 20)

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

rs_status rs__tcp_fail(tcp *t, rs_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->base.error, sizeof(t->base.error), fmt, ap);
	va_end(ap);
	t->broken = 1;
	return st;
}

/* How much of message m, done bytes in, one send or recv moves: a checksummed one in pieces (rs_xfer). */
static size_t piece(const rs_xfer *m, size_t done)
{
	size_t left = m->len - done;
	return m->crc && left > CRC_PIECE ? CRC_PIECE : left;
}

/* n more bytes of m's body went out or came in (`in`) at `at`: hashed where m asks for it, counted. */
static void moved(const rs_xfer *m, flow *f, char *at, size_t n, int in)
{
	if (m->crc && in && n && rs_transport_damage_for_tests) {
		rs_transport_damage_for_tests = 0;
		at[n / 2] ^= 0x40;
	}
	if (m->crc)
		*m->crc = rs_crc32c(*m->crc, at, n);
	f->body_done += n;
}

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
			char *at = (char *)m->buf + f->body_done;
			ssize_t n = send(t->fd[p], at, piece(m, f->body_done), MSG_NOSIGNAL);
			if (n < 0)
				goto io_error;
			moved(m, f, at, (size_t)n, 0);
			continue;
		}
		f->cur++;
		f->hdr_done = f->body_done = 0;
	}
	return RS_OK;
io_error:
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return RS_OK;
	return rs__tcp_fail(t, RS_EPEER, "transport: rank %d: sending to rank %d: %s", t->base.rank, p, strerror(errno));
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
				return rs__tcp_fail(t, RS_ECORRUPT,
						    "transport: rank %d: from rank %d: message of %llu bytes in exchange %llu, expected %zu bytes in exchange %llu",
						    t->base.rank, p, (unsigned long long)f->hdr.len, (unsigned long long)f->hdr.seq,
						    m->len, (unsigned long long)t->seq);
			continue;
		}
		if (f->body_done < m->len) {
			char *at = (char *)m->buf + f->body_done;
			n = recv(t->fd[p], at, piece(m, f->body_done), 0);
			if (n <= 0)
				goto io_end;
			moved(m, f, at, (size_t)n, 1);
			continue;
		}
		f->cur++;
		f->hdr_done = f->body_done = 0;
	}
	return RS_OK;
io_end:
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return RS_OK;
	return rs__tcp_fail(t, RS_EPEER, "transport: rank %d: rank %d %s%s", t->base.rank, p, n == 0 ? "" : "failed: ",
			    n == 0 ? "closed the connection (gone?)" : strerror(errno));
}

rs_status rs__tcp_exchange(rs_transport *base, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs)
{
	tcp *t = (tcp *)base;
	int32_t w = base->world, me = base->rank;
	rs_status st = RS_OK;

	if (atomic_load(&t->aborted))
		return rs__tcp_fail(t, RS_EABORTED, "transport: aborted");
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
			st = rs__tcp_fail(t, RS_EINVAL, "transport: message for rank %d, world has %d", p, w);
			goto done;
		}
	}
	/* to self: copies, matched in order */
	if (out[me].n != in[me].n) {
		st = rs__tcp_fail(t, RS_EINVAL, "transport: %d sends but %d receives to self", out[me].n, in[me].n);
		goto done;
	}
	for (int i = 0; i < out[me].n; i++) {
		if (out[me].msgs[i]->len != in[me].msgs[i]->len) {
			st = rs__tcp_fail(t, RS_EINVAL, "transport: self message %d: %zu bytes sent, %zu expected", i,
					  out[me].msgs[i]->len, in[me].msgs[i]->len);
			goto done;
		}
		const rs_xfer *from = out[me].msgs[i], *to = in[me].msgs[i];
		if (from->crc)
			*from->crc = rs_crc32c(*from->crc, from->buf, from->len);
		memmove(to->buf, from->buf, from->len);
		if (to->crc && to->len && rs_transport_damage_for_tests) {
			rs_transport_damage_for_tests = 0;
			((unsigned char *)to->buf)[to->len / 2] ^= 0x40;
		}
		if (to->crc)
			*to->crc = rs_crc32c(*to->crc, to->buf, to->len);
	}
	out[me].cur = out[me].n;
	in[me].cur = in[me].n;

	int64_t deadline = rs_now_ms() + t->base.timeout_ms;
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
		int rc = poll(pfd, (nfds_t)np + 1, rs__tcp_left_ms(deadline));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0) {
			st = rs__tcp_fail(t, RS_ESYS, "transport: poll: %s", strerror(errno));
			goto done;
		}
		if (atomic_load(&t->aborted)) {
			st = rs__tcp_fail(t, RS_EABORTED, "transport: aborted");
			goto done;
		}
		if (rc == 0) {
			st = rs__tcp_fail(t, RS_ETIMEDOUT,
					  "transport: rank %d: exchange %llu timed out after %d ms waiting for rank %d", me,
					  (unsigned long long)t->seq, t->base.timeout_ms, pfd_peer[0]);
			goto done;
		}
		for (int k = 0; k < np; k++) {
			int32_t p = pfd_peer[k];
			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
				RSCHECKGOTO(pump_recv(t, p, &in[p]), st, done);
			if (pfd[k].revents & (POLLOUT | POLLERR))
				RSCHECKGOTO(pump_send(t, p, &out[p]), st, done);
			if ((pfd[k].revents & (POLLHUP | POLLERR)) && in[p].cur == in[p].n && out[p].cur < out[p].n) {
				st = rs__tcp_fail(t, RS_EPEER, "transport: rank %d: rank %d hung up", me, p);
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
