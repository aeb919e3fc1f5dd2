/*
 * auth.h - proving knowledge of the join token without sending it.
 *
 * Every handshake (worker -> coordinator on the control channel, worker ->
 * worker on a generation's transport mesh) is a challenge-response in both
 * directions: each side draws a fresh random nonce, and each proves it
 * holds the token with an HMAC-SHA256 (OpenSSL's libcrypto), keyed by the
 * token, over a label naming the step and everything the handshake binds
 * (both nonces, names, the generation, the coordinator's epoch). A
 * listener that is not the real peer learns only proofs bound to its own
 * nonces, useless anywhere else; a replayed handshake fails because the
 * real peer's nonce is new.
 */
#ifndef RS_AUTH_H
#define RS_AUTH_H

#include "common/status.h"

#include <stddef.h>

#define RS_AUTH_NONCE_BYTES 16
#define RS_AUTH_NONCE_HEX (2 * RS_AUTH_NONCE_BYTES) /* characters, without the NUL */
#define RS_AUTH_PROOF_HEX 64                        /* HMAC-SHA256 in hex, without the NUL */

/* A fresh random nonce, as RS_AUTH_NONCE_HEX hex digits and a NUL into out. */
rs_status rs_auth_nonce(char out[RS_AUTH_NONCE_HEX + 1]);

/*
 * The proof for `label` and the n strings of parts: hex(HMAC-SHA256(token,
 * label NUL part[0] NUL part[1] ...)) into out. RS_EINVAL for an empty token.
 */
rs_status rs_auth_proof(const char *token, const char *label, const char *const *parts, int n,
			char out[RS_AUTH_PROOF_HEX + 1]);

/* 1 when proof is the proof for label and parts, compared in constant time. */
int rs_auth_check(const char *token, const char *label, const char *const *parts, int n, const char *proof);

/* a == b in time that depends on their lengths only. */
int rs_auth_equal(const char *a, const char *b);

/* A nonce as a handshake carries it: exactly RS_AUTH_NONCE_HEX lowercase hex digits. */
int rs_auth_nonce_ok(const char *s);

#endif
