/*
 * secret.h - random secrets from the operating system: join tokens and
 * per-process incarnations.
 */
#ifndef RS_SECRET_H
#define RS_SECRET_H

#include "common/status.h"

#include <stddef.h>

/* Fill buf with n random bytes from the kernel (getrandom): RS_ESYS when it cannot. */
rs_status rs_secret_bytes(void *buf, size_t n);

/* nbytes random bytes as 2 * nbytes lowercase hex digits and a NUL into out (out_len >= 2 * nbytes + 1). */
rs_status rs_secret_hex(char *out, size_t out_len, size_t nbytes);

#endif
