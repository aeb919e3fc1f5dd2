/*
 * bench_transport.c - the TCP transport's throughput beside raw loopback
 * TCP measured in the same run (two processes, one socket, large writes):
 * point-to-point (what migration uses; target >= 80% of raw), a 2-rank
 * all-to-all and the all-reduce (target >= 50% of raw: each rank sends and
 * receives half the buffer twice, and on loopback both directions of a
 * copy take the same cores, so about half of one direction's rate is the
 * ceiling on 2 cores). Received data is checked; a mismatch fails the
 * benchmark. `--raw` prints the raw reference alone; `--raw-mesh S R MiB`
 * raw loopback in a reshard's pattern (bench_reshard.sh's reference).
 */
#include "common/rng.h"
#include "worker/transport_tcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Raw loopback: one connected TCP pair across two processes, GB/s. */
static double raw_loopback(size_t total)
{
	int lfd, port;
	rs_err err = {0};
	if (rs_tcp_listen("127.0.0.1", 0, &lfd, &port, &err) != RS_OK)
		return -1;
	size_t chunk = 1 << 20;
	char *buf = calloc(1, chunk);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(0x7f000001)};
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
			_exit(1);
		for (size_t done = 0; done < total;) {
			ssize_t n = send(fd, buf, chunk, 0);
			if (n <= 0)
				_exit(1);
			done += (size_t)n;
		}
		close(fd);
		_exit(0);
	}
	int fd = accept(lfd, NULL, NULL);
	double t0 = now();
	size_t got = 0;
	for (;;) {
		ssize_t n = recv(fd, buf, chunk, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	double t = now() - t0;
	close(fd);
	close(lfd);
	waitpid(pid, NULL, 0);
	free(buf);
	return got == total ? (double)total / t / 1e9 : -1;
}

typedef struct result {
	double p2p_gbs, a2a_gbs, ar_gbs;
	int wrong;
} result;

static void run_rank(int32_t rank, int lfd, const char **addrs, size_t total, int fd_out)
{
	rs_tcp_config cfg = {.rank = rank, .world = 2, .addrs = addrs, .listen_fd = lfd, .token = "bench",
			     .generation = 1, .timeout_ms = 30000};
	rs_transport *t;
	rs_err err = {0};
	result r = {0};
	if (rs_tcp_transport_create(&cfg, &t, &err) != RS_OK) {
		fprintf(stderr, "%s\n", err.msg);
		_exit(1);
	}
	size_t msg = (size_t)64 << 20;
	unsigned char *buf = malloc(msg);
	for (size_t i = 0; i < msg; i++)
		buf[i] = (unsigned char)(i * 7 + (size_t)rank);
	/* point to point, rank 0 -> rank 1 */
	double t0 = now();
	for (size_t done = 0; done < total; done += msg) {
		rs_xfer x = {1 - rank, buf, msg, NULL};
		rs_transport_exchange(t, rank == 0 ? &x : NULL, rank == 0, rank == 1 ? &x : NULL, rank == 1);
	}
	r.p2p_gbs = (double)total / (now() - t0) / 1e9;
	if (rank == 1)
		for (size_t i = 0; i < msg; i += 4093)
			r.wrong += buf[i] != (unsigned char)(i * 7);
	/* all-to-all: both directions at once */
	size_t half = msg / 2, counts[2] = {half, half};
	unsigned char *rb = malloc(msg);
	t0 = now();
	for (size_t done = 0; done < total; done += msg)
		rs_transport_alltoallv(t, buf, counts, rb, counts);
	r.a2a_gbs = (double)total / (now() - t0) / 1e9;
	/* all-reduce of 16 MiB: algorithm bandwidth = bytes reduced per second */
	size_t nf = (size_t)4 << 20;
	float *f = malloc(sizeof(float) * nf);
	int reps = 32; /* 16 MiB a call: enough calls for a stable figure on a shared machine */
	double in_calls = 0;
	for (int k = 0; k < reps; k++) {
		for (size_t i = 0; i < nf; i++)
			f[i] = (float)(i % 100);
		t0 = now(); /* the call alone: filling the buffer is not the all-reduce's time */
		rs_transport_allreduce_sum(t, f, nf);
		in_calls += now() - t0;
	}
	r.ar_gbs = (double)reps * (double)nf * 4 / in_calls / 1e9;
	for (size_t i = 0; i < nf; i += 997)
		r.wrong += f[i] != 2.0f * (float)(i % 100);
	if (write(fd_out, &r, sizeof(r)) != sizeof(r))
		_exit(1);
	rs_transport_destroy(t);
	_exit(0);
}

/* How long raw_mesh's processes wait for each other at most. */
#define MESH_WAIT_MS 30000

/* A buffer of len bytes, its pages touched, in 2 MiB pages where the kernel has them (as the CPU engine's shards are). */
static char *touched_buffer(size_t len, int fill)
{
	void *p;
	if (posix_memalign(&p, (size_t)2 << 20, len) != 0)
		return NULL;
	(void)madvise(p, len, MADV_HUGEPAGE); /* advice; small pages work */
	memset(p, fill, len);
	return p;
}

/* One byte from fd within `ms` milliseconds: 1, or 0 at a timeout, an error or the end (every writer gone). */
static int byte_within(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c;
	return poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 1;
}

/*
 * Move `pair` bytes over each of the n sockets fd[], region k of buf for
 * fd[k]: received (out 0) or sent (out 1), whichever socket is ready.
 * 1 once all moved; 0 at an error, a peer's end or MESH_WAIT_MS of quiet.
 */
static int mesh_pump(const int *fd, int n, char *buf, size_t pair, int out)
{
	size_t done[16] = {0};
	for (int left = n; left > 0;) {
		struct pollfd pfd[16];
		for (int k = 0; k < n; k++)
			pfd[k] = (struct pollfd){.fd = done[k] < pair ? fd[k] : -1, .events = out ? POLLOUT : POLLIN};
		if (poll(pfd, (nfds_t)n, MESH_WAIT_MS) <= 0)
			return 0;
		for (int k = 0; k < n; k++) {
			if (done[k] == pair || !pfd[k].revents)
				continue;
			char *at = buf + pair * (size_t)k + done[k];
			ssize_t got = out ? send(fd[k], at, pair - done[k], MSG_DONTWAIT | MSG_NOSIGNAL)
					  : recv(fd[k], at, pair - done[k], MSG_DONTWAIT);
			if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
				return 0;
			done[k] += got > 0 ? (size_t)got : 0;
			left -= done[k] == pair;
		}
	}
	return 1;
}

/* Receiver r of raw_mesh: a connection from each sender, their shares into one region each. Exits 0 when all came. */
static void mesh_receiver(int lfd, int senders, size_t pair, int ready, int done)
{
	int fd[16];
	char *buf = touched_buffer(pair * (size_t)senders, 0), one = 1;
	if (!buf)
		_exit(1);
	for (int k = 0; k < senders; k++) {
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		if (poll(&p, 1, MESH_WAIT_MS) != 1 || (fd[k] = accept(lfd, NULL, NULL)) < 0)
			_exit(1);
	}
	if (write(ready, &one, 1) != 1 || !mesh_pump(fd, senders, buf, pair, 0))
		_exit(1);
	_exit(write(done, &one, 1) == 1 ? 0 : 1);
}

/* Sender s of raw_mesh: connected to every receiver, it sends each its share once the parent says go. */
static void mesh_sender(const int *port, int receivers, size_t pair, int ready, int go)
{
	int fd[16];
	char *buf = touched_buffer(pair * (size_t)receivers, 1), one = 1;
	if (!buf)
		_exit(1);
	for (int r = 0; r < receivers; r++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port[r]),
					.sin_addr.s_addr = htonl(0x7f000001)};
		if ((fd[r] = socket(AF_INET, SOCK_STREAM, 0)) < 0 || connect(fd[r], (struct sockaddr *)&a, sizeof(a)) != 0)
			_exit(1);
	}
	if (write(ready, &one, 1) != 1 || !byte_within(go, MESH_WAIT_MS))
		_exit(1);
	_exit(mesh_pump(fd, receivers, buf, pair, 1) ? 0 : 1);
}

/*
 * Raw loopback in a reshard's pattern, the reference for its chunk rounds:
 * `senders` processes each send total / senders bytes, an equal share to
 * each of `receivers` processes, from and into buffers as large as the
 * state moved (memory, not a cache-resident buffer sent over and over as
 * raw_loopback does), their pages touched first (touched_buffer). Plain
 * sockets, poll. GB/s from the start signal to the last byte received; -1
 * on a failure or when a process is quiet for MESH_WAIT_MS (it is killed).
 */
static double raw_mesh(int senders, int receivers, size_t total)
{
	int lfd[16], port[16], ready[2] = {-1, -1}, go[2] = {-1, -1}, done[2] = {-1, -1}, nlfd = 0, ok, nkids = 0, status;
	pid_t kid[32];
	rs_err err = {0};
	if (senders < 1 || receivers < 1 || senders > 16 || receivers > 16 || total / (size_t)senders / (size_t)receivers == 0)
		return -1;
	size_t pair = total / (size_t)senders / (size_t)receivers;
	ok = pipe(ready) == 0 && pipe(go) == 0 && pipe(done) == 0;
	for (; ok && nlfd < receivers && (ok = rs_tcp_listen("127.0.0.1", 0, &lfd[nlfd], &port[nlfd], &err) == RS_OK);)
		nlfd++;
	for (int k = 0; ok && k < receivers + senders; k++) {
		pid_t pid = fork();
		if (pid == 0) { /* a child keeps the ends it writes or reads */
			close(ready[0]), close(go[1]), close(done[0]);
			if (k < receivers)
				mesh_receiver(lfd[k], senders, pair, ready[1], done[1]);
			mesh_sender(port, receivers, pair, ready[1], go[0]);
		}
		ok = pid > 0;
		if (ok)
			kid[nkids++] = pid;
	}
	close(ready[1]), close(go[0]), close(done[1]); /* all of them gone early: the parent's reads end (else a wait's limit) */
	for (int k = 0; ok && k < senders + receivers; k++)
		ok = byte_within(ready[0], MESH_WAIT_MS);
	double t0 = now();
	char c = 1;
	for (int s = 0; ok && s < senders; s++)
		ok = write(go[1], &c, 1) == 1;
	for (int r = 0; ok && r < receivers; r++)
		ok = byte_within(done[0], MESH_WAIT_MS);
	double t = now() - t0;
	for (int k = 0; !ok && k < nkids; k++)
		kill(kid[k], SIGKILL);
	close(go[1]); /* senders still waiting for it: the end */
	for (int k = 0; k < nkids; k++)
		ok = waitpid(kid[k], &status, 0) == kid[k] && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
	for (int r = 0; r < nlfd; r++)
		close(lfd[r]);
	close(ready[0]), close(done[0]); /* close(-1) of a pipe never made fails harmlessly */
	return ok ? (double)(pair * (size_t)senders * (size_t)receivers) / t / 1e9 : -1;
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "--quick");
	if (argc > 1 && !strcmp(argv[1], "--raw")) { /* the reference alone, for other benchmarks */
		double raw = raw_loopback((size_t)2 << 30);
		printf("raw loopback TCP %.2f GB/s\n", raw);
		return raw > 0 ? 0 : 1;
	}
	if (argc > 1 && !strcmp(argv[1], "--raw-mesh")) { /* raw_mesh's reference alone: SENDERS RECEIVERS MiB */
		long n[3];
		for (int k = 0; argc == 5 && k < 3; k++) {
			char *end;
			errno = 0;
			n[k] = strtol(argv[k + 2], &end, 10);
			if (errno || end == argv[k + 2] || *end || n[k] < 1 || n[k] > (k < 2 ? 16 : 65536))
				argc = 0;
		}
		if (argc != 5) {
			fprintf(stderr, "usage: bench_transport --raw-mesh SENDERS RECEIVERS MIB (1-16, 1-16, 1-65536)\n");
			return 2;
		}
		double gbs = raw_mesh((int)n[0], (int)n[1], (size_t)n[2] << 20);
		printf("raw loopback TCP mesh %s -> %s from memory %.2f GB/s\n", argv[2], argv[3], gbs);
		return gbs > 0 ? 0 : 1;
	}
	size_t total = (size_t)(quick ? 256 : 2048) << 20;
	double raw = raw_loopback(total);
	int lfd[2], port[2], pipes[2][2];
	char ab[2][32];
	const char *addrs[2];
	rs_err err = {0};
	for (int r = 0; r < 2; r++) {
		if (rs_tcp_listen("127.0.0.1", 0, &lfd[r], &port[r], &err) != RS_OK || pipe(pipes[r]) != 0)
			return 1;
		snprintf(ab[r], sizeof(ab[r]), "127.0.0.1:%d", port[r]);
		addrs[r] = ab[r];
	}
	for (int r = 0; r < 2; r++)
		if (fork() == 0) {
			close(lfd[1 - r]);
			run_rank(r, lfd[r], addrs, total, pipes[r][1]);
		}
	close(lfd[0]);
	close(lfd[1]);
	result res[2];
	int wrong = 0;
	for (int r = 0; r < 2; r++) {
		if (read(pipes[r][0], &res[r], sizeof(result)) != sizeof(result))
			wrong++;
		wrong += res[r].wrong;
	}
	while (wait(NULL) > 0)
		;
	printf("bench transport_p2p: %.2f GB/s | raw loopback TCP %.2f GB/s | ratio %.2f | target >= 0.80 %s\n",
	       res[1].p2p_gbs, raw, res[1].p2p_gbs / raw, res[1].p2p_gbs >= 0.8 * raw ? "MET" : "MISSED");
	printf("bench transport_alltoall_2: %.2f GB/s per rank sent | raw loopback TCP %.2f GB/s | ratio %.2f\n",
	       res[0].a2a_gbs, raw, res[0].a2a_gbs / raw);
	printf("bench transport_allreduce_2x16MiB: %.2f GB/s reduced | raw loopback TCP %.2f GB/s | ratio %.2f | "
	       "target >= 0.50 %s\n", res[0].ar_gbs, raw, res[0].ar_gbs / raw,
	       res[0].ar_gbs >= 0.5 * raw ? "MET" : "MISSED");
	if (wrong)
		fprintf(stderr, "bench transport: %d wrong results\n", wrong);
	return wrong ? 1 : 0;
}
