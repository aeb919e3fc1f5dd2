/* zjson.c - JSON values as deflated, base64-encoded strings (zjson.h). */
#include "common/zjson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *in, size_t n)
{
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);
		*o++ = B64[v >> 18 & 63];
		*o++ = B64[v >> 12 & 63];
		*o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? B64[v & 63] : '=';
	}
	*o = 0;
	return out;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(B64, c) : NULL;
	return p ? (int)(p - B64) : -1;
}

/* Canonical base64 only (length a multiple of 4, padding only at the end, unused bits zero). */
static int b64_decode(const char *in, size_t n, unsigned char *out, size_t *outn)
{
	size_t o = 0;
	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		int pad = (in[i + 2] == '=') + (in[i + 3] == '=');
		if ((pad && i + 4 != n) || (in[i + 2] == '=' && in[i + 3] != '='))
			return -1;
		int a = b64_value(in[i]), b = b64_value(in[i + 1]);
		int c = pad >= 2 ? 0 : b64_value(in[i + 2]), d = pad >= 1 ? 0 : b64_value(in[i + 3]);
		if (a < 0 || b < 0 || c < 0 || d < 0)
			return -1;
		uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
		if ((pad == 2 && (v & 0xffff)) || (pad == 1 && (v & 0xff)))
			return -1;
		out[o++] = (unsigned char)(v >> 16);
		if (pad < 2)
			out[o++] = (unsigned char)(v >> 8);
		if (pad < 1)
			out[o++] = (unsigned char)v;
	}
	*outn = o;
	return 0;
}

char *rs_zjson_encode(const json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY), *out = NULL;
	if (!text)
		return NULL;
	size_t n = strlen(text);
	uLongf zn = compressBound((uLong)n);
	unsigned char *z = malloc(zn);
	if (z && compress2(z, &zn, (const Bytef *)text, (uLong)n, 6) == Z_OK)
		out = b64_encode(z, zn);
	free(z);
	free(text);
	return out;
}

/* Inflate z (zn bytes) into a new NUL-terminated buffer of at most max bytes. */
static rs_status inflate_all(const unsigned char *z, size_t zn, size_t max, const char *where, char **out,
			     size_t *outn, rs_err *err)
{
	z_stream s;
	memset(&s, 0, sizeof(s));
	if (inflateInit(&s) != Z_OK)
		return rs_err_set(err, RS_ENOMEM, "%s: cannot start inflating", where);
	size_t cap = zn * 4 + 64 < max ? zn * 4 + 64 : max, len = 0;
	char *buf = malloc(cap + 1);
	rs_status st = buf ? RS_OK : RS_ENOMEM;
	s.next_in = (Bytef *)z, s.avail_in = (uInt)zn;
	int r = Z_OK;
	while (st == RS_OK && r != Z_STREAM_END) {
		if (len == cap) {
			size_t ncap = cap > max / 2 ? max : cap * 2;
			char *nb = ncap > cap ? realloc(buf, ncap + 1) : NULL;
			if (ncap == cap) {
				st = rs_err_set(err, RS_EINVAL, "%s: inflates to more than %zu bytes", where, max);
				break;
			}
			if (!nb) {
				st = RS_ENOMEM;
				break;
			}
			buf = nb, cap = ncap;
		}
		s.next_out = (Bytef *)buf + len, s.avail_out = (uInt)(cap - len);
		r = inflate(&s, Z_NO_FLUSH);
		len = cap - s.avail_out;
		if (r != Z_OK && r != Z_STREAM_END && !(r == Z_BUF_ERROR && len == cap))
			st = rs_err_set(err, RS_EINVAL, "%s: not a whole zlib stream (%s)", where, s.msg ? s.msg : "truncated");
	}
	if (st == RS_OK && s.avail_in != 0)
		st = rs_err_set(err, RS_EINVAL, "%s: %u bytes after the end of its zlib stream", where, s.avail_in);
	inflateEnd(&s);
	if (st != RS_OK) {
		free(buf);
		return st;
	}
	buf[len] = 0;
	*out = buf, *outn = len;
	return RS_OK;
}

rs_status rs_zjson_decode(const char *text, size_t max, const char *where, json_t **out, rs_err *err)
{
	size_t n = strlen(text), zn = 0, len = 0;
	unsigned char *z = malloc(n / 4 * 3 + 3);
	char *json = NULL;
	if (!z)
		return RS_ENOMEM;
	rs_status st = b64_decode(text, n, z, &zn) != 0
			       ? rs_err_set(err, RS_EINVAL, "%s: not base64", where)
			       : inflate_all(z, zn, max, where, &json, &len, err);
	free(z);
	if (st != RS_OK)
		return st;
	json_error_t jerr;
	*out = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	free(json);
	if (!*out)
		return rs_err_set(err, RS_EINVAL, "%s: inflated, column %d: %s", where, jerr.column, jerr.text);
	return RS_OK;
}

rs_status rs_zjson_object(json_t *v, size_t cap, const char *where, json_t **out, rs_err *err)
{
	if (json_is_object(v)) {
		*out = json_incref(v);
		return RS_OK;
	}
	if (!json_is_string(v))
		return rs_err_set(err, RS_EINVAL, "%s: neither an object nor a zjson string", where);
	size_t z = json_string_length(v), floor = (size_t)16 << 20;
	if (strlen(json_string_value(v)) != z)
		return rs_err_set(err, RS_EINVAL, "%s: a zjson string with a NUL in it", where);
	size_t max = z > cap / 64 ? cap : z * 64 < floor ? floor : z * 64;
	RSCHECK(rs_zjson_decode(json_string_value(v), max < cap ? max : cap, where, out, err));
	if (json_is_object(*out))
		return RS_OK;
	json_decref(*out), *out = NULL;
	return rs_err_set(err, RS_EINVAL, "%s: inflates to something other than an object", where);
}
