/*
 * watch.h - the Kubernetes watch stream, parsed as it arrives: a chunked
 * HTTP body of newline-delimited JSON events
 *   {"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}
 * cut anywhere by the network (an event split across chunks, several in one
 * chunk). Each complete line is checked and handed over as an rs_watch_event.
 * An ERROR event carries a Status (code 410 "Expired" tells the client to
 * list again); a BOOKMARK only moves the resourceVersion on.
 * resourceVersions are opaque strings: never compared, only remembered.
 */
#ifndef RS_WATCH_H
#define RS_WATCH_H

#include "common/status.h"

#include <jansson.h>
#include <stddef.h>

#define RS_WATCH_MAX_LINE ((size_t)16 << 20)

typedef enum rs_watch_type {
	RS_WATCH_ADDED,
	RS_WATCH_MODIFIED,
	RS_WATCH_DELETED,
	RS_WATCH_BOOKMARK,
	RS_WATCH_ERROR,
} rs_watch_type;

/* One event; everything borrowed from the parser, valid during the callback. */
typedef struct rs_watch_event {
	rs_watch_type type;
	json_t *object;               /* the object (a Status for ERROR) */
	const char *name;             /* metadata.name ("" for BOOKMARK and ERROR) */
	const char *resource_version; /* metadata.resourceVersion, "" when absent (ERROR) */
	int code;                     /* ERROR: the Status code (410: resourceVersion too old), else 0 */
	const char *message;          /* ERROR: the Status message, else "" */
} rs_watch_event;

typedef void (*rs_watch_fn)(void *ctx, const rs_watch_event *ev);

typedef struct rs_watch_parser {
	char *buf;                    /* the incomplete last line */
	size_t len, cap;
	size_t max_line;              /* 0: RS_WATCH_MAX_LINE */
	unsigned long long events;    /* events handed over so far */
} rs_watch_parser;

/* Zero-initialize, or rs_watch_reset, before the first feed of a stream. */
void rs_watch_reset(rs_watch_parser *p);
void rs_watch_free(rs_watch_parser *p);

/*
 * Feed n bytes of the body. fn runs once per complete event, in order.
 * A line that is not an event of the shapes above, or longer than the
 * limit, stops the feed with RS_ECORRUPT and a message naming the line's
 * position and what was wrong: the stream cannot be trusted after it (the
 * caller drops the watch and lists again). Empty lines are skipped.
 */
rs_status rs_watch_feed(rs_watch_parser *p, const char *data, size_t n, rs_watch_fn fn, void *ctx, rs_err *err);

/* Bytes of an incomplete event held back: at the end of a stream, a cut-off event. */
size_t rs_watch_pending(const rs_watch_parser *p);

#endif
