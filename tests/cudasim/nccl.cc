/*
 * nccl.cc - the CUDA simulator's NCCL (libncclsim.so): the calls of
 * include/nccl.h, between processes on one machine, on the simulator's
 * streams. Test infrastructure (tests/cudasim): never linked into the
 * product. It lets the NCCL transport (worker/transport_nccl.c) run its
 * tests and whole elastic jobs with no GPU.
 *
 * The model, what it shares with NCCL and where it is stricter:
 *  - A communicator is its ranks' processes joined by Unix stream sockets
 *    in Linux's abstract namespace, named from the unique id (16 random
 *    bytes): rank r listens on "ncclsim-<id>-<r>" (a split child's name
 *    adds the split's number and color), connects to every lower rank and
 *    is connected to by every higher one, each connection opening with a
 *    hello that names the rank. A unique id serves one communicator: a
 *    process that joins a second one with the same id fails
 *    (ncclInvalidUsage), as NCCL's bootstrap serves one init.
 *  - Non-blocking communicators (config->blocking = 0) return
 *    ncclInProgress from init and split; ncclCommGetAsyncError makes their
 *    progress (connecting; the split's exchange of colors and keys over the
 *    parent) and says ncclInProgress until it is done. Blocking ones finish
 *    before returning, with no timeout, as NCCL's do.
 *  - ncclSend, ncclRecv and ncclAllReduce queue their transfers on the
 *    stream (cudasim_enqueue_poll); a group (ncclGroupStart/End) queues its
 *    operations as one piece of work, and on a non-blocking communicator
 *    only once ncclCommGetAsyncError has seen the call through: until then
 *    it returns ncclInProgress and the stream does not hold the work, so a
 *    host that waits on the stream without waiting for the communicator
 *    first finds nothing received. A call that fails inside a group fails
 *    the group: ncclGroupEnd returns its error and queues nothing. The
 *    work moves when the stream is drained (the host waits for it or
 *    queries it), each drain moving what the sockets take without
 *    blocking, with device memory open. Per peer, messages go in the order
 *    they were queued; each carries its byte count, and a receive of
 *    another size fails the communicator (ncclInvalidUsage, where NCCL
 *    would hang or corrupt memory).
 *  - Buffers must be device, managed or pinned memory, as a GPU needs: a
 *    pageable host pointer, or a buffer shorter than the call's count, is
 *    ncclInvalidArgument (on a GPU, a fault).
 *  - A peer that closes its connection (it exited or aborted) fails the
 *    communicator: ncclRemoteError from ncclCommGetAsyncError, as NCCL's
 *    network transport may report it. With NCCLSIM_PEER_LOSS=hang, as
 *    NCCL's kernels within a node do, nothing is reported: the transfers
 *    to that peer stop, and only the host's own deadline ends the wait.
 *    Either way the work queued never completes, as an NCCL kernel waiting
 *    for a peer that is gone, until ncclCommAbort (or ncclCommDestroy) ends
 *    it: a host that waits on the stream without watching the
 *    communicator and a deadline hangs, as it would on a GPU.
 *  - ncclAllReduce (float sums only): every rank sends its buffer to every
 *    other and adds the ranks' buffers in rank order, so that every rank
 *    gets the same bits (NCCL's order depends on its algorithm and chunks:
 *    a test that needs its bits to match another run's cannot rely on this).
 *  - ncclCommAbort closes everything at once, queued work included;
 *    ncclCommFinalize (non-blocking) is in progress until the queued work
 *    is done (a drain of its stream moves it: waiting on the communicator
 *    alone does not); ncclCommDestroy frees the communicator.
 *  - Waits that block (cudaStreamSynchronize, cudaFree, ...) on work of a
 *    failed communicator not aborted yet hang, as on a GPU (and, holding
 *    the simulator's lock, stop the process's other CUDA calls too).
 *
 * One lock covers every communicator. It is never held across a call into
 * the CUDA simulator, whose lock is held while a drain polls the work here.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

extern "C" size_t cudasim_bytes_held(const void *p, size_t bytes);
extern "C" cudaError_t cudasim_enqueue_poll(cudaStream_t stream, int (*poll)(void *), int (*ready)(void *), void *arg,
					   const char *what);

namespace {

std::mutex lock;
#define LOCKED std::lock_guard<std::mutex> ncclsim_guard(lock)

const char ID_MAGIC[8] = {'n', 'c', 'c', 'l', 's', 'i', 'm', '1'};
const uint32_t HELLO_MAGIC = 0x4E43534Du; /* "NCSM" */
enum : uint32_t { KIND_DATA = 1, KIND_SPLIT = 2 };

/* What precedes every message on a connection: its kind and its payload's length. */
struct header {
	uint32_t magic, kind;
	uint64_t bytes;
};

/* One message of a piece of work: a send to or a receive from peer. */
struct xfer {
	bool send;
	int peer;
	char *buf;
	size_t bytes;
	uint32_t kind;
	header hdr;       /* a send's, or the one that arrived */
	size_t hdone = 0; /* header bytes moved */
	size_t done = 0;  /* payload bytes moved */
	bool complete = false;
};

struct comm_state;

/* Work queued on a stream (or a split's exchange): its messages, and what to do once they all moved. */
struct work {
	std::shared_ptr<comm_state> c;
	std::vector<xfer> x;
	bool finished = false;
	/* an all-reduce: count floats from `in` (at the end) and the peers' copies, summed in rank order into `out` */
	const float *in = nullptr;
	float *out = nullptr;
	size_t count = 0;
	std::vector<std::vector<float>> copies;
	std::vector<int32_t> words; /* a split's (color, key) out and in, a pair per peer each */
};

struct comm_state {
	std::string name;
	int nranks = 0, rank = -1;
	int listen_fd = -1;
	std::vector<int> fd;               /* per peer: its connection, -1 until made */
	std::vector<int> unnamed;          /* connections accepted whose hello has not come yet */
	ncclResult_t state = ncclInProgress; /* ncclSuccess once connected; an error once failed */
	bool aborted = false, finalizing = false;
	bool nonblocking = false;
	std::vector<std::pair<work *, cudaStream_t>> deferred; /* a non-blocking call's work, not on its stream yet */
	std::vector<bool> gone;            /* per peer: its connection broke (NCCLSIM_PEER_LOSS=hang) */
	std::string last_error;
	int splits = 0;                    /* splits made of it (their children's names) */
	int queued = 0;                    /* pieces of work queued and not finished */
	std::shared_ptr<work> splitting;   /* a split's exchange under way over it */
	/* a split child before its parent's exchange ends: the exchange, and this rank's color and key */
	std::shared_ptr<work> split;
	int color = 0, key = 0;
	int split_number = 0;
};

}  /* namespace */

/* The handle: the state outlives it while work queued on a stream holds it. */
struct ncclComm {
	std::shared_ptr<comm_state> c;
};

namespace {

thread_local char last_text[512];

ncclResult_t failed(comm_state *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t failed(comm_state *c, ncclResult_t r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c && c->state != ncclSuccess && c->state != ncclInProgress)
		return r; /* the first failure is the cause, said once */
	if (c) {
		c->state = r;
		c->last_error = msg;
	}
	fprintf(stderr, "ncclsim: %s%s%s\n", c ? c->name.c_str() : "", c ? ": " : "", msg);
	return r;
}

/* A bad call: no communicator to fail, the message on stderr and as the thread's last error. */
ncclResult_t bad_call(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t bad_call(ncclResult_t r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_text, sizeof(last_text), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ncclsim: %s\n", last_text);
	return r;
}

void nap()
{
	struct timespec ts = {0, 50000};
	nanosleep(&ts, nullptr);
}

sockaddr_un address(const std::string &name, int rank, socklen_t *len)
{
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	std::string path = name + "-" + std::to_string(rank);
	size_t n = std::min(path.size(), sizeof(a.sun_path) - 2);
	memcpy(a.sun_path + 1, path.data(), n); /* sun_path[0] = 0: the abstract namespace, no file */
	*len = (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + n);
	return a;
}

void close_all(comm_state *c)
{
	for (int &f : c->fd)
		if (f >= 0)
			close(f), f = -1;
	for (int f : c->unnamed)
		close(f);
	c->unnamed.clear();
	if (c->listen_fd >= 0)
		close(c->listen_fd), c->listen_fd = -1;
}

/* Listen as c's rank (its name and rank set). */
ncclResult_t listen_as(comm_state *c)
{
	c->fd.assign((size_t)c->nranks, -1);
	c->gone.assign((size_t)c->nranks, false);
	if (c->nranks == 1) {
		c->state = ncclSuccess;
		return ncclSuccess;
	}
	socklen_t len;
	sockaddr_un a = address(c->name, c->rank, &len);
	int f = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f < 0)
		return failed(c, ncclSystemError, "socket: %s", strerror(errno));
	if (bind(f, (sockaddr *)&a, len) != 0 || listen(f, 64) != 0) {
		int e = errno;
		close(f);
		return failed(c, e == EADDRINUSE ? ncclInvalidUsage : ncclSystemError, "rank %d cannot listen: %s%s", c->rank,
			      strerror(e), e == EADDRINUSE ? " (a unique id serves one communicator)" : "");
	}
	c->listen_fd = f;
	return ncclSuccess;
}

/* Connecting, as far as it goes without waiting: to every lower rank, from every higher one. */
void advance_connect(comm_state *c)
{
	if (c->state != ncclInProgress || c->rank < 0)
		return;
	for (int j = 0; j < c->rank; j++) {
		if (c->fd[(size_t)j] >= 0)
			continue;
		socklen_t len;
		sockaddr_un a = address(c->name, j, &len);
		int f = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (f < 0) {
			failed(c, ncclSystemError, "socket: %s", strerror(errno));
			return;
		}
		if (connect(f, (sockaddr *)&a, len) != 0) {
			int e = errno;
			close(f);
			if (e == ECONNREFUSED || e == ENOENT || e == EAGAIN)
				continue; /* rank j is not listening yet */
			failed(c, ncclSystemError, "connecting to rank %d: %s", j, strerror(e));
			return;
		}
		uint32_t hello[2] = {HELLO_MAGIC, (uint32_t)c->rank};
		if (send(f, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
			close(f);
			failed(c, ncclRemoteError, "saying hello to rank %d: %s", j, strerror(errno));
			return;
		}
		int buf = 4 << 20;
		(void)setsockopt(f, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)); /* fewer polls per message; advice */
		c->fd[(size_t)j] = f;
	}
	int f;
	while (c->listen_fd >= 0 && (f = accept4(c->listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
		c->unnamed.push_back(f);
	for (size_t k = 0; k < c->unnamed.size();) {
		uint32_t hello[2];
		ssize_t n = recv(c->unnamed[k], hello, sizeof(hello), MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			k++;
			continue;
		}
		if (n != (ssize_t)sizeof(hello)) {
			if (n > 0) { /* a hello in two pieces */
				k++;
				continue;
			}
			close(c->unnamed[k]); /* a peer that went away before naming itself: it will try again or fail */
			c->unnamed.erase(c->unnamed.begin() + (long)k);
			continue;
		}
		(void)!recv(c->unnamed[k], hello, sizeof(hello), 0);
		int r = (int)hello[1];
		if (hello[0] != HELLO_MAGIC || r <= c->rank || r >= c->nranks || c->fd[(size_t)r] >= 0) {
			failed(c, ncclInvalidUsage, "a connection that says it is rank %d (magic %08x): two ranks %d?", r,
			       hello[0], r);
			return;
		}
		c->fd[(size_t)r] = c->unnamed[k];
		c->unnamed.erase(c->unnamed.begin() + (long)k);
	}
	for (int j = 0; j < c->nranks; j++)
		if (j != c->rank && c->fd[(size_t)j] < 0)
			return;
	close(c->listen_fd); /* everyone is here */
	c->listen_fd = -1;
	c->state = ncclSuccess;
}

/* A peer's connection broke: the communicator fails (ncclRemoteError), or with NCCLSIM_PEER_LOSS=hang its transfers stop. */
void peer_lost(comm_state *c, int peer, ssize_t n)
{
	const char *mode = getenv("NCCLSIM_PEER_LOSS");
	if (mode && !strcmp(mode, "hang")) {
		c->gone[(size_t)peer] = true;
		return;
	}
	failed(c, ncclRemoteError, "rank %d: %s", peer, n == 0 ? "closed its connection" : strerror(errno));
}

/* One send or receive of up to len bytes at p for x, not waiting: the bytes moved; 0 to wait, or the peer lost (peer_lost). */
size_t move_some(comm_state *c, const xfer &x, char *p, size_t len)
{
	int f = c->fd[(size_t)x.peer];
	ssize_t n = x.send ? send(f, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(f, p, len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n <= 0) {
		peer_lost(c, x.peer, n);
		return 0;
	}
	return (size_t)n;
}

/* Move what the sockets take of one message; false when it must wait, or its peer is lost. */
bool advance_xfer(comm_state *c, xfer &x)
{
	if (c->gone[(size_t)x.peer])
		return false;
	while (x.hdone < sizeof(header)) {
		size_t n = move_some(c, x, (char *)&x.hdr + x.hdone, sizeof(header) - x.hdone);
		if (n == 0)
			return false;
		x.hdone += n;
		if (x.hdone == sizeof(header) && !x.send &&
		    (x.hdr.magic != HELLO_MAGIC || x.hdr.kind != x.kind || x.hdr.bytes != x.bytes)) {
			failed(c, ncclInvalidUsage,
			       "rank %d sent a %s message of %llu bytes where a %s receive of %zu bytes was queued", x.peer,
			       x.hdr.kind == KIND_SPLIT ? "split" : "data", (unsigned long long)x.hdr.bytes,
			       x.kind == KIND_SPLIT ? "split" : "data", x.bytes);
			return false;
		}
	}
	while (x.done < x.bytes) {
		/* device memory opens where device work touches it, which a system call's access does not do: touched first */
		size_t len = std::min(x.bytes - x.done, (size_t)1 << 20);
		for (size_t o = 0; o < len; o += 4096)
			(void)*(volatile char *)(x.buf + x.done + o);
		(void)*(volatile char *)(x.buf + x.done + len - 1);
		size_t n = move_some(c, x, x.buf + x.done, len);
		if (n == 0)
			return false;
		x.done += n;
	}
	x.complete = true;
	return true;
}

double seconds()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * The sockets w waits on (its first unfinished message per peer and
 * direction) into *fds; true when it has a message to self instead, which
 * waits on nothing.
 */
bool waiting_on(const comm_state *c, const work &w, std::vector<pollfd> *fds)
{
	std::map<std::pair<int, bool>, bool> first;
	for (const xfer &x : w.x) {
		if (x.complete || first[{x.peer, x.send}])
			continue;
		first[{x.peer, x.send}] = true;
		if (x.peer == c->rank)
			return true;
		if (!c->gone[(size_t)x.peer]) /* a peer gone (NCCLSIM_PEER_LOSS=hang) is waited on for ever: not polled */
			fds->push_back({c->fd[(size_t)x.peer], (short)(x.send ? POLLOUT : POLLIN), 0});
	}
	return false;
}

/*
 * Move what can move of w's messages; true once they all have, or once its
 * communicator is aborted. A failed communicator's work waits for that.
 */
bool advance_work(work &w)
{
	comm_state *c = w.c.get();
	if (w.finished)
		return true;
	if (c->aborted) {
		w.finished = true; /* nothing more moves */
		return true;
	}
	if (c->state != ncclSuccess)
		return false;
	/* to self: the k-th send meets the k-th receive */
	std::vector<xfer *> ss, sr;
	for (xfer &x : w.x)
		if (x.peer == c->rank && !x.complete)
			(x.send ? ss : sr).push_back(&x);
	if (ss.size() != sr.size()) {
		failed(c, ncclInvalidUsage, "%zu sends but %zu receives to self in one group", ss.size(), sr.size());
		return false;
	}
	for (size_t k = 0; k < ss.size(); k++) {
		if (ss[k]->bytes != sr[k]->bytes) {
			failed(c, ncclInvalidUsage, "a send to self of %zu bytes, a receive of %zu", ss[k]->bytes, sr[k]->bytes);
			return false;
		}
		memmove(sr[k]->buf, ss[k]->buf, ss[k]->bytes);
		ss[k]->complete = sr[k]->complete = true;
	}
	/*
	 * To the others: per peer and direction, in order, each as far as its socket goes; while the peers keep
	 * up, on again rather than back to the host's wait (a nap), for a few milliseconds at most.
	 */
	bool all = false;
	double until = seconds() + 0.005;
	for (;;) {
		bool progress = true;
		while (progress && c->state == ncclSuccess) {
			progress = false;
			all = true;
			std::map<std::pair<int, bool>, bool> blocked;
			for (xfer &x : w.x) {
				if (x.complete)
					continue;
				all = false;
				bool &b = blocked[{x.peer, x.send}];
				if (b)
					continue;
				size_t before = x.hdone + x.done;
				if (!advance_xfer(c, x))
					b = true;
				progress |= x.hdone + x.done != before;
			}
		}
		std::vector<pollfd> fds;
		if (c->state != ncclSuccess || all || seconds() > until || waiting_on(c, w, &fds) ||
		    poll(fds.data(), fds.size(), 1) <= 0)
			break;
	}
	if (c->state != ncclSuccess || !all)
		return false;
	if (w.out) { /* the all-reduce's sum, in rank order */
		for (size_t i = 0; i < w.count; i++) {
			float acc = 0;
			for (int r = 0; r < c->nranks; r++) {
				float v = r == c->rank ? w.in[i] : w.copies[(size_t)r][i];
				acc = r == 0 ? v : acc + v;
			}
			w.out[i] = acc;
		}
	}
	w.finished = true;
	return true;
}

/* Whether w may progress now: done, aborted, a message to self, or a socket it waits on is ready. */
int ready_work(void *arg)
{
	work *w = (work *)arg;
	LOCKED;
	comm_state *c = w->c.get();
	if (w->finished || c->aborted)
		return 1;
	if (c->state != ncclSuccess)
		return 0;
	std::vector<pollfd> fds;
	bool self = waiting_on(c, *w, &fds);
	bool left = std::any_of(w->x.begin(), w->x.end(), [](const xfer &x) { return !x.complete; });
	return self || !left || (!fds.empty() && poll(fds.data(), fds.size(), 0) != 0);
}

/* The stream's poll of a piece of work (cudasim_enqueue_poll). */
int poll_work(void *arg)
{
	work *w = (work *)arg;
	bool done;
	{
		LOCKED;
		done = advance_work(*w);
		if (done)
			w->c->queued--;
	}
	if (done)
		delete w;
	return done;
}

/* ---- the split ------------------------------------------------------------------------- */

/* The child's rank among those of its color, once the parent's exchange has ended; its connecting begun. */
void advance_split_child(comm_state *child)
{
	if (child->rank >= 0 || !child->split)
		return;
	work &w = *child->split;
	comm_state *p = w.c.get();
	bool done = advance_work(w);
	if (p->aborted || p->state != ncclSuccess) {
		failed(child, p->aborted ? ncclInvalidUsage : p->state, "the split's exchange failed: %s",
		       p->aborted ? "its parent was aborted" : p->last_error.c_str());
		child->split.reset();
		return;
	}
	if (!done)
		return;
	/* every member's (color, key): its own, and what each peer sent */
	std::vector<std::pair<int, int>> ck((size_t)p->nranks);
	ck[(size_t)p->rank] = {child->color, child->key};
	for (const xfer &x : w.x)
		if (!x.send) {
			int32_t v[2];
			memcpy(v, x.buf, sizeof(v));
			ck[(size_t)x.peer] = {v[0], v[1]};
		}
	std::vector<std::pair<int, int>> members; /* (key, parent rank) of this color */
	for (int r = 0; r < p->nranks; r++)
		if (ck[(size_t)r].first == child->color)
			members.push_back({ck[(size_t)r].second, r});
	std::sort(members.begin(), members.end());
	child->nranks = (int)members.size();
	for (size_t k = 0; k < members.size(); k++)
		if (members[k].second == p->rank)
			child->rank = (int)k;
	child->name = p->name + "/" + std::to_string(child->split_number) + "c" + std::to_string(child->color);
	child->split.reset();
	listen_as(child);
}

/* ---- helpers of the calls ------------------------------------------------------------------ */

comm_state *state_of(ncclComm_t comm) { return comm ? comm->c.get() : nullptr; }

bool blocking(const ncclConfig_t *config) { return !config || config->blocking != 0; }

/* A non-blocking call's end, or for a blocking one the wait for it (no timeout, as NCCL's). */
ncclResult_t finish(ncclComm_t comm, bool block)
{
	for (;;) {
		ncclResult_t r = ncclSuccess;
		ncclCommGetAsyncError(comm, &r);
		if (r != ncclInProgress || !block)
			return r;
		nap();
	}
}

/* The memory a transfer may use: device, managed or pinned (what a GPU can reach). */
ncclResult_t check_buffer(const char *call, const void *p, size_t bytes)
{
	if (bytes == 0)
		return ncclSuccess;
	cudaPointerAttributes a;
	if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type == cudaMemoryTypeUnregistered) {
		(void)cudaGetLastError();
		return bad_call(ncclInvalidArgument, "%s: buffer %p (%zu bytes) is not device, managed or pinned memory", call,
				p, bytes);
	}
	size_t held = cudasim_bytes_held(p, bytes);
	if (held < bytes) /* NCCL would read or write past the end: on a GPU, a fault or another buffer's bytes */
		return bad_call(ncclInvalidArgument, "%s: buffer %p holds %zu of the %zu bytes the call moves", call, p,
				held, bytes);
	return ncclSuccess;
}

size_t type_bytes(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

/* The group being built on this thread (ncclGroupStart .. ncclGroupEnd), and the first error of a call in it. */
struct pending {
	std::shared_ptr<comm_state> c;
	cudaStream_t stream;
	xfer x;
};
thread_local int group_depth;
thread_local std::vector<pending> group;
thread_local ncclResult_t group_error = ncclSuccess;

/* Put w on its stream (not holding the lock: the simulator's is taken first). */
ncclResult_t enqueue(work *w, cudaStream_t stream)
{
	if (cudasim_enqueue_poll(stream, poll_work, ready_work, w, "ncclsim transfers") == cudaSuccess)
		return ncclSuccess;
	LOCKED;
	w->c->queued--;
	failed(w->c.get(), ncclUnhandledCudaError, "queueing transfers on stream %p failed", (void *)stream);
	delete w;
	return ncclUnhandledCudaError;
}

/*
 * Queue w on its stream, or, on a non-blocking communicator, hold it until
 * ncclCommGetAsyncError sees the call through (ncclInProgress meanwhile).
 */
ncclResult_t submit_work(work *w, cudaStream_t stream)
{
	{
		LOCKED;
		w->c->queued++;
		if (w->c->nonblocking) {
			w->c->deferred.push_back({w, stream});
			return ncclInProgress;
		}
	}
	return enqueue(w, stream);
}

/* Each (communicator, stream)'s messages of `ops` as one piece of work (ops is emptied). */
ncclResult_t submit(std::vector<pending> &ops)
{
	ncclResult_t r = ncclSuccess;
	while (!ops.empty()) {
		work *w = new work;
		w->c = ops.front().c;
		cudaStream_t stream = ops.front().stream;
		std::vector<pending> rest;
		for (pending &p : ops)
			if (p.c == w->c && p.stream == stream)
				w->x.push_back(p.x);
			else
				rest.push_back(p);
		ops.swap(rest);
		ncclResult_t one = submit_work(w, stream);
		if (r == ncclSuccess || (r == ncclInProgress && one != ncclSuccess))
			r = one;
	}
	return r;
}

/* Whether c takes a new operation: ready, and no earlier non-blocking call still held (ncclInvalidUsage, said, if not). */
ncclResult_t usable(const char *call, const comm_state *c)
{
	if (c->aborted || c->state != ncclSuccess || !c->deferred.empty())
		return bad_call(ncclInvalidUsage, "%s on a communicator that is %s", call,
				c->state == ncclInProgress ? "not ready yet"
				: !c->deferred.empty()     ? "still in progress (ncclCommGetAsyncError has not seen it through)"
							   : "broken");
	return ncclSuccess;
}

ncclResult_t check_send_recv(const char *call, const void *buf, size_t count, ncclDataType_t type, int peer,
			     comm_state *c)
{
	size_t tb = type_bytes(type);
	if (!c || !tb)
		return bad_call(ncclInvalidArgument, "%s: %s", call, !c ? "no communicator" : "unknown data type");
	ncclResult_t r = check_buffer(call, buf, count * tb);
	if (r != ncclSuccess)
		return r;
	LOCKED;
	if ((r = usable(call, c)) != ncclSuccess)
		return r;
	if (peer < 0 || peer >= c->nranks)
		return bad_call(ncclInvalidArgument, "%s: peer %d of %d ranks", call, peer, c->nranks);
	return ncclSuccess;
}

ncclResult_t add(const char *call, bool send, const void *buf, size_t count, ncclDataType_t type, int peer,
		 ncclComm_t comm, cudaStream_t stream)
{
	ncclResult_t r = check_send_recv(call, buf, count, type, peer, state_of(comm));
	if (r != ncclSuccess) {
		if (group_depth > 0 && group_error == ncclSuccess)
			group_error = r; /* the group fails as a whole */
		return r;
	}
	size_t bytes = count * type_bytes(type);
	xfer x{send, peer, (char *)buf, bytes, KIND_DATA, {HELLO_MAGIC, KIND_DATA, bytes}};
	group.push_back({comm->c, stream, x});
	if (group_depth > 0)
		return ncclSuccess;
	return submit(group);
}

}  /* namespace */

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	if (!id)
		return bad_call(ncclInvalidArgument, "ncclGetUniqueId: no output");
	memset(id, 0, sizeof(*id));
	memcpy(id->internal, ID_MAGIC, sizeof(ID_MAGIC));
	if (getrandom(id->internal + 8, 16, 0) != 16)
		return bad_call(ncclSystemError, "ncclGetUniqueId: getrandom: %s", strerror(errno));
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
	if (!comm)
		return bad_call(ncclInvalidArgument, "ncclCommInitRank: no output");
	*comm = nullptr;
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return bad_call(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
	if (memcmp(id.internal, ID_MAGIC, sizeof(ID_MAGIC)) != 0)
		return bad_call(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
	auto c = std::make_shared<comm_state>();
	char hex[33];
	for (int k = 0; k < 16; k++)
		snprintf(hex + 2 * k, 3, "%02x", (unsigned char)id.internal[8 + k]);
	c->name = std::string("ncclsim-") + hex;
	c->nranks = nranks;
	c->rank = rank;
	c->nonblocking = !blocking(config);
	ncclResult_t r;
	{
		LOCKED;
		static std::set<std::string> used; /* the ids this process joined with */
		if (!used.insert(c->name).second)
			return bad_call(ncclInvalidUsage, "ncclCommInitRank: unique id %s used again (it serves one communicator)",
					hex);
		r = listen_as(c.get());
		if (r == ncclSuccess)
			advance_connect(c.get());
	}
	if (r != ncclSuccess)
		return r;
	*comm = new ncclComm{c};
	return finish(*comm, blocking(config));
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
	comm_state *p = state_of(comm);
	if (!p || !newcomm)
		return bad_call(ncclInvalidArgument, "ncclCommSplit: no communicator or output");
	*newcomm = nullptr;
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
		return bad_call(ncclInvalidArgument, "ncclCommSplit: color %d", color);
	auto child = std::make_shared<comm_state>();
	{
		LOCKED;
		if (p->splitting)
			return bad_call(ncclInvalidUsage, "ncclCommSplit on a communicator that is splitting already");
		ncclResult_t u = usable("ncclCommSplit", p);
		if (u != ncclSuccess)
			return u;
		/*
		 * The exchange of (color, key) with every member over the parent: the parent's async error
		 * progresses it (members or not, every rank waits on the parent), the child's too.
		 */
		auto w = std::make_shared<work>();
		w->c = comm->c;
		w->words.assign(4 * (size_t)p->nranks, 0);
		for (int r = 0; r < p->nranks; r++) {
			if (r == p->rank)
				continue;
			int32_t *out = &w->words[4 * (size_t)r], *in = out + 2;
			out[0] = color, out[1] = key;
			w->x.push_back({true, r, (char *)out, 8, KIND_SPLIT, {HELLO_MAGIC, KIND_SPLIT, 8}});
			w->x.push_back({false, r, (char *)in, 8, KIND_SPLIT, {}});
		}
		p->splitting = w;
		child->split = w;
		child->color = color, child->key = key;
		child->split_number = p->splits++;
		child->nonblocking = config ? !blocking(config) : p->nonblocking; /* as NCCL: the parent's, unless given */
		advance_work(*w);
	}
	ncclComm_t handle_child = new ncclComm{child};
	bool block = !child->nonblocking;
	ncclResult_t r = finish(comm, block);
	if (color == NCCL_SPLIT_NOCOLOR || (r != ncclSuccess && r != ncclInProgress)) {
		delete handle_child; /* not a member (or failed): no communicator, as NCCL gives none */
		return r;
	}
	*newcomm = handle_child;
	if (block)
		return finish(handle_child, true);
	return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
	comm_state *c = state_of(comm);
	if (!c || !err)
		return bad_call(ncclInvalidArgument, "ncclCommGetAsyncError: no communicator or output");
	std::vector<std::pair<work *, cudaStream_t>> go;
	{
		LOCKED;
		if (c->splitting && advance_work(*c->splitting)) /* a split's exchange over it */
			c->splitting.reset();
		if (c->split) /* a split child: its rank comes with the parent's exchange */
			advance_split_child(c);
		advance_connect(c);
		go.swap(c->deferred); /* a non-blocking call seen through: its work goes on its stream now */
	}
	for (auto &g : go)
		enqueue(g.first, g.second);
	LOCKED;
	*err = c->state;
	if (*err == ncclSuccess && (c->splitting || !go.empty())) /* (the call just seen through: done next time) */
		*err = ncclInProgress;
	if (*err == ncclSuccess && c->finalizing && c->queued > 0)
		*err = ncclInProgress;
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	comm_state *c = state_of(comm);
	if (!c)
		return bad_call(ncclInvalidArgument, "ncclCommFinalize: no communicator");
	LOCKED;
	c->finalizing = true;
	return c->queued > 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	comm_state *c = state_of(comm);
	if (!c)
		return bad_call(ncclInvalidArgument, "ncclCommDestroy: no communicator");
	{
		LOCKED;
		c->aborted = true; /* work still queued (never waited for) moves nothing more */
		close_all(c);
		for (auto &g : c->deferred) /* never queued */
			delete g.first;
		c->queued -= (int)c->deferred.size();
		c->deferred.clear();
		c->splitting.reset(); /* (it holds c) */
	}
	delete comm;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t comm)
{
	comm_state *c = state_of(comm);
	if (c) {
		LOCKED;
		snprintf(last_text, sizeof(last_text), "%s", c->last_error.c_str());
	}
	return last_text;
}

ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth == 0)
		return bad_call(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--group_depth > 0)
		return ncclSuccess;
	ncclResult_t r = group_error;
	group_error = ncclSuccess;
	if (r != ncclSuccess) { /* a call in it failed: nothing of it is queued */
		group.clear();
		return r;
	}
	return submit(group);
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream)
{
	return add("ncclSend", true, buf, count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream)
{
	return add("ncclRecv", false, buf, count, type, peer, comm, stream);
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t type, ncclRedOp_t op,
			   ncclComm_t comm, cudaStream_t stream)
{
	comm_state *c = state_of(comm);
	if (!c)
		return bad_call(ncclInvalidArgument, "ncclAllReduce: no communicator");
	if (type != ncclFloat32 || op != ncclSum)
		return bad_call(ncclInvalidArgument, "ncclAllReduce: only float sums are simulated");
	ncclResult_t r;
	if ((r = check_buffer("ncclAllReduce", in, count * 4)) != ncclSuccess ||
	    (r = check_buffer("ncclAllReduce", out, count * 4)) != ncclSuccess)
		return r;
	if (group_depth > 0)
		return bad_call(ncclInvalidUsage, "ncclAllReduce inside a group is not simulated");
	work *w = new work;
	w->c = comm->c;
	w->in = (const float *)in, w->out = (float *)out, w->count = count;
	{
		LOCKED;
		if ((r = usable("ncclAllReduce", c)) != ncclSuccess) {
			delete w;
			return r;
		}
		w->copies.resize((size_t)c->nranks);
		for (int p = 0; p < c->nranks; p++) {
			if (p == c->rank)
				continue;
			w->copies[(size_t)p].resize(count);
			w->x.push_back({true, p, (char *)in, count * 4, KIND_DATA, {HELLO_MAGIC, KIND_DATA, count * 4}});
			w->x.push_back({false, p, (char *)w->copies[(size_t)p].data(), count * 4, KIND_DATA, {}});
		}
	}
	return submit_work(w, stream);
}

} /* extern "C" */
