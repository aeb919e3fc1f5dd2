/*
 * wsmsg.h - whole JSON messages over one libwebsockets connection: reassembly
 * of fragmented frames into messages (with a size limit), and a bounded
 * queue of outgoing messages written one per WRITEABLE callback (lws allows
 * writing only from there). Used by both ends of the control channel.
 *
 * Not thread-safe: owned by the thread that services the lws context.
 */
#ifndef RS_WSMSG_H
#define RS_WSMSG_H

#include "common/status.h"

#include <jansson.h>
#include <libwebsockets.h>
#include <stddef.h>

typedef struct rs_wsmsg_out {
	char *buf;                 /* LWS_PRE bytes of headroom, then the message */
	size_t len;
	struct rs_wsmsg_out *next;
} rs_wsmsg_out;

typedef struct rs_wsmsg {
	char *rx;                  /* the message being reassembled */
	size_t rx_len, rx_cap, rx_max;
	int rx_overflow;           /* the current message went past rx_max: it is dropped */
	rs_wsmsg_out *head, *tail;
	size_t queued, queue_max;  /* messages waiting, and the most allowed */
} rs_wsmsg;

void rs_wsmsg_init(rs_wsmsg *m, size_t rx_max, size_t queue_max);
void rs_wsmsg_free(rs_wsmsg *m);

/*
 * Add a received fragment. Returns 1 with *msg (NUL-terminated, owned by m,
 * valid until the next call) when a whole message is complete, 0 while more
 * fragments are due, -1 when a complete message was over the size limit
 * (dropped).
 */
int rs_wsmsg_rx(rs_wsmsg *m, const void *in, size_t len, int first, int final, const char **msg, size_t *msg_len);

/* Queue j's compact JSON text for sending (steals nothing: j stays the caller's). RS_ENOSPACE when the queue is full. */
rs_status rs_wsmsg_push(rs_wsmsg *m, const json_t *j);

/* From a WRITEABLE callback: write the oldest queued message. Returns -1 on a write error, else the messages left. */
int rs_wsmsg_write(rs_wsmsg *m, struct lws *wsi);

/*
 * Service ctx for at most timeout_ms (0: handle what is pending and return).
 * lws 4 ignores lws_service's own timeout and may sleep until its next
 * event; a scheduled wake-up bounds the wait.
 */
void rs_ws_service(struct lws_context *ctx, int timeout_ms);

/*
 * How long a WebSocket may go without proof that its peer answers (a PONG;
 * lws counts no message as proof) before lws sends a PING (ping_s), and
 * before it hangs up without the PONG (hangup_s): every context sets it.
 * A peer may be busy for hangup_s - ping_s (570 s) without losing its
 * connection: lws's default (300 and 310 s) gave it 10 s, and a
 * coordinator busy that long (a slow API call, a thousand members on one
 * machine) lost every idle member at once (a worker busy for long, building,
 * loading or saving a large model, has its link kept by a thread of its
 * own: worker/link.h). A peer that stopped
 * answering for good is found within hangup_s. Tests shorten it with
 * rs_ws_set_idle_policy (1 <= ping_s < hangup_s, else the defaults)
 * before creating their contexts; lws reads it live. The binaries take
 * hangup_s from --ws-hangup-s (rs_ws_set_hangup: ping_s is a twentieth of
 * it, at least 1 s).
 */
#define RS_WS_PING_S 30
#define RS_WS_HANGUP_S 600
#define RS_WS_TEXT_(x) #x
#define RS_WS_TEXT(x) RS_WS_TEXT_(x)
#define RS_WS_HANGUP_TEXT RS_WS_TEXT(RS_WS_HANGUP_S) /* "600": --ws-hangup-s's default, as its flag tables want it */
const lws_retry_bo_t *rs_ws_idle_policy(void);
void rs_ws_set_idle_policy(uint16_t ping_s, uint16_t hangup_s);
void rs_ws_set_hangup(uint16_t hangup_s); /* says so in the log when not the default */
/* --ws-hangup-s's range: a PING a second and a hang-up 2 s later at least; a dead peer found within the hour */
#define RS_WS_HANGUP_MIN_S 3
#define RS_WS_HANGUP_MAX_S 3600

/*
 * libwebsockets' errors go through rs_log (escaped, like every log line;
 * 10 at once, then one a second, the rest counted: a peer can cause them),
 * and the last one this thread saw is kept (rs_ws_last_error): a
 * certificate that fails verification is said only there, never in the
 * failed connection's own text. Call before creating a context.
 */
void rs_ws_log_init(void);
const char *rs_ws_last_error(void);
void rs_ws_clear_error(void);

#endif
