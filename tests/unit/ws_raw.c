/*
 * ws_raw.c - see ws_raw.h.
 */
#include "tests/unit/ws_raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void set_timeouts(int fd)
{
	struct timeval tv = {WSR_TIMEOUT_S, 0};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int wsr_connect(int port, int rcvbuf)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rcvbuf > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	set_timeouts(fd);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
	for (const char *c = p; n;) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	for (char *c = p; n;) {
		ssize_t r = recv(fd, c, n, 0);
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Read an HTTP head (up to the blank line, byte by byte: nothing past it is consumed); its status, or -1. */
static int read_head(int fd, char *head, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		if (recv(fd, head + n, 1, 0) != 1)
			return -1;
		head[++n] = 0;
		if (n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4))
			break;
	}
	int code;
	return sscanf(head, "HTTP/1.1 %d", &code) == 1 ? code : -1;
}

int wsr_upgrade(int fd, const char *path, const char *protocol, const char *host, const char *origin,
		const char *extra)
{
	char req[2048], head[4096];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\n%s%s%s%s%s%sUpgrade: websocket\r\nConnection: Upgrade\r\n"
			 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
			 "Sec-WebSocket-Protocol: %s\r\n%s\r\n",
			 path, host ? "Host: " : "", host ? host : "", host ? "\r\n" : "", origin ? "Origin: " : "",
			 origin ? origin : "", origin ? "\r\n" : "", protocol, extra ? extra : "");
	if (n < 0 || (size_t)n >= sizeof(req) || write_all(fd, req, (size_t)n) != 0)
		return -1;
	return read_head(fd, head, sizeof(head));
}

int wsr_http_get(int port, const char *path, const char *host)
{
	char req[1024], head[4096];
	int fd = wsr_connect(port, 0);
	if (fd < 0)
		return -1;
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\n%s%s%sConnection: close\r\n\r\n", path,
			 host ? "Host: " : "", host ? host : "", host ? "\r\n" : "");
	int code = n > 0 && (size_t)n < sizeof(req) && write_all(fd, req, (size_t)n) == 0 ? read_head(fd, head, sizeof(head))
											   : -1;
	close(fd);
	return code;
}

int wsr_send(int fd, const void *p, size_t n, int masked)
{
	unsigned char head[14], mask[4] = {0x12, 0x34, 0x56, 0x78};
	size_t h = 0;
	head[h++] = 0x81;
	unsigned char m = masked ? 0x80 : 0;
	if (n < 126) {
		head[h++] = m | (unsigned char)n;
	} else if (n < 65536) {
		head[h++] = m | 126;
		head[h++] = (unsigned char)(n >> 8);
		head[h++] = (unsigned char)n;
	} else {
		head[h++] = m | 127;
		for (int k = 7; k >= 0; k--)
			head[h++] = (unsigned char)((uint64_t)n >> (8 * k));
	}
	if (masked) {
		memcpy(head + h, mask, 4);
		h += 4;
	}
	if (!masked)
		return write_all(fd, head, h) == 0 && write_all(fd, p, n) == 0 ? 0 : -1;
	unsigned char *body = malloc(n ? n : 1);
	if (!body)
		return -1;
	for (size_t i = 0; i < n; i++)
		body[i] = ((const unsigned char *)p)[i] ^ mask[i % 4];
	int rc = write_all(fd, head, h) == 0 && write_all(fd, body, n) == 0 ? 0 : -1;
	free(body);
	return rc;
}

char *wsr_recv(int fd, size_t *n, size_t max)
{
	char *msg = NULL;
	size_t len = 0;
	for (;;) {
		unsigned char h[2], ext[8], key[4];
		if (read_all(fd, h, 2) != 0)
			break;
		uint64_t flen = h[1] & 0x7f;
		int op = h[0] & 0x0f, fin = h[0] & 0x80;
		if (flen >= 126) {
			size_t k = flen == 126 ? 2 : 8;
			if (read_all(fd, ext, k) != 0)
				break;
			flen = 0;
			for (size_t i = 0; i < k; i++)
				flen = flen << 8 | ext[i];
		}
		if ((h[1] & 0x80) && read_all(fd, key, 4) != 0)
			break;
		if (op == 8 || len + flen > max)
			break;
		char *grown = realloc(msg, len + flen + 1);
		if (!grown || read_all(fd, grown + len, flen) != 0) {
			msg = grown ? grown : msg;
			break;
		}
		msg = grown;
		if (h[1] & 0x80)
			for (uint64_t i = 0; i < flen; i++)
				msg[len + i] ^= (char)key[i % 4];
		if (op == 9 || op == 10)
			continue; /* ping, pong: not part of the message */
		len += flen;
		if (fin) {
			msg[len] = 0;
			*n = len;
			return msg;
		}
	}
	free(msg);
	return NULL;
}

int wsr_closed(int fd)
{
	char buf[65536];
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r == 0)
			return 1;
		if (r < 0)
			return errno != EAGAIN && errno != EWOULDBLOCK; /* a reset closes it too; a timeout does not */
	}
}

int wsr_listen(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

int wsr_accept_upgrade(int lfd, const char *protocol)
{
	static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
	char head[4096], key[128], resp[512];
	unsigned char sha[SHA_DIGEST_LENGTH], answer[64];
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		return -1;
	set_timeouts(fd);
	head[0] = 0;
	size_t n = 0;
	while (n + 1 < sizeof(head) && !(n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4))) {
		if (recv(fd, head + n, 1, 0) != 1)
			goto fail;
		head[++n] = 0;
	}
	const char *k = strcasestr(head, "Sec-WebSocket-Key:");
	if (!k || sscanf(k + 18, " %100[^\r\n]", key) != 1)
		goto fail;
	strcat(key, guid);
	SHA1((const unsigned char *)key, strlen(key), sha);
	EVP_EncodeBlock(answer, sha, SHA_DIGEST_LENGTH);
	int len = snprintf(resp, sizeof(resp),
			   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
			   "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n",
			   answer, protocol);
	if (len > 0 && (size_t)len < sizeof(resp) && write_all(fd, resp, (size_t)len) == 0)
		return fd;
fail:
	close(fd);
	return -1;
}

long wsr_rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}
