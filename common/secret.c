/*
 * secret.c - see secret.h.
 */
#include "common/secret.h"

#include <errno.h>
#include <stdio.h>
#include <sys/random.h>

rs_status rs_secret_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return RS_ESYS;
		p += got;
		n -= (size_t)got;
	}
	return RS_OK;
}

rs_status rs_secret_hex(char *out, size_t out_len, size_t nbytes)
{
	unsigned char raw[64];
	if (nbytes > sizeof(raw) || out_len < 2 * nbytes + 1)
		return RS_EINVAL;
	RSCHECK(rs_secret_bytes(raw, nbytes));
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	out[2 * nbytes] = 0;
	return RS_OK;
}
