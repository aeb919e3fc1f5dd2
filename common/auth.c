/*
 * auth.c - see auth.h.
 */
#include "common/auth.h"
#include "common/secret.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rs_status rs_auth_nonce(char out[RS_AUTH_NONCE_HEX + 1])
{
	return rs_secret_hex(out, RS_AUTH_NONCE_HEX + 1, RS_AUTH_NONCE_BYTES);
}

rs_status rs_auth_proof(const char *token, const char *label, const char *const *parts, int n,
			char out[RS_AUTH_PROOF_HEX + 1])
{
	unsigned char mac[EVP_MAX_MD_SIZE], *msg;
	size_t len = strlen(label) + 1, maclen = 0;
	out[0] = 0;
	if (!token || !token[0])
		return RS_EINVAL;
	for (int i = 0; i < n; i++)
		len += strlen(parts[i]) + 1;
	if (!(msg = malloc(len)))
		return RS_ENOMEM;
	size_t at = strlen(label) + 1;
	memcpy(msg, label, at);
	for (int i = 0; i < n; i++) {
		size_t k = strlen(parts[i]) + 1;
		memcpy(msg + at, parts[i], k);
		at += k;
	}
	unsigned char *ok = EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, token, strlen(token), msg, len, mac,
				      sizeof(mac), &maclen);
	free(msg);
	if (!ok || maclen * 2 != RS_AUTH_PROOF_HEX)
		return RS_ESYS;
	for (size_t i = 0; i < maclen; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	return RS_OK;
}

int rs_auth_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;
	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

int rs_auth_check(const char *token, const char *label, const char *const *parts, int n, const char *proof)
{
	char want[RS_AUTH_PROOF_HEX + 1];
	return proof && rs_auth_proof(token, label, parts, n, want) == RS_OK && rs_auth_equal(want, proof);
}

int rs_auth_nonce_ok(const char *s)
{
	return s && strlen(s) == RS_AUTH_NONCE_HEX && strspn(s, "0123456789abcdef") == RS_AUTH_NONCE_HEX;
}
