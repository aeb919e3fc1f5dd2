/*
 * ws_raw.h - a raw WebSocket peer for the unit tests of the control channel
 * (test_server.c, test_control.c): plain blocking sockets on loopback, every
 * read and write bounded by a timeout, no libwebsockets, so a test can
 * play the hostile or broken peer the code under test must withstand, on
 * either side of the connection. Every call returns -1 (or NULL) on a
 * failure or a timeout rather than asserting: the tests decide.
 */
#ifndef RS_TEST_WS_RAW_H
#define RS_TEST_WS_RAW_H

#include <stddef.h>

#define WSR_TIMEOUT_S 10 /* what counts as "no answer": generous, it only tells a hang from a finish */

/* A TCP connection to 127.0.0.1:port (receive buffer rcvbuf bytes when > 0), or -1. */
int wsr_connect(int port, int rcvbuf);

/*
 * Ask for a WebSocket upgrade on fd: GET path with Host host (NULL: none),
 * Origin origin (NULL: none), Sec-WebSocket-Protocol protocol, and extra
 * header lines (NULL or "Name: value\r\n..."). Returns the HTTP status of
 * the answer (101 when upgraded), or -1 when none came.
 */
int wsr_upgrade(int fd, const char *path, const char *protocol, const char *host, const char *origin,
		const char *extra);

/* GET path from 127.0.0.1:port with Host host (NULL: none): the HTTP status, or -1. */
int wsr_http_get(int port, const char *path, const char *host);

/* Send one text frame (masked: a client's; unmasked: a server's). 0, or -1. */
int wsr_send(int fd, const void *p, size_t n, int masked);

/*
 * The next whole message on fd (continuation frames joined; ping and pong
 * skipped), NUL-terminated, malloc'd, its length in *n. NULL on a close
 * frame, end of stream, a timeout or a message over max bytes.
 */
char *wsr_recv(int fd, size_t *n, size_t max);

/* Whether the peer closes fd (a close frame or end of stream) within WSR_TIMEOUT_S, reading past any message. */
int wsr_closed(int fd);

/* A listening socket on 127.0.0.1, its port in *port, or -1. */
int wsr_listen(int *port);

/* Accept one connection on lfd and answer its WebSocket upgrade (101, subprotocol protocol): the connection, or -1. */
int wsr_accept_upgrade(int lfd, const char *protocol);

/* This process's resident memory, KiB (VmRSS), or -1. */
long wsr_rss_kib(void);

#endif
