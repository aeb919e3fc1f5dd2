/*
 * safetensors.c - see safetensors.h. Little-endian hosts only (x86-64 and
 * arm64), like the format itself.
 */
#include "common/safetensors.h"
#include "common/crc32c.h"
#include "common/file.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
	const char *name;
	int size;
} dtypes[RS_ST_DTYPE_COUNT] = {
	[RS_ST_F32] = {"F32", 4}, [RS_ST_F16] = {"F16", 2}, [RS_ST_BF16] = {"BF16", 2}, [RS_ST_F64] = {"F64", 8},
	[RS_ST_I64] = {"I64", 8}, [RS_ST_I32] = {"I32", 4}, [RS_ST_U32] = {"U32", 4},  [RS_ST_U8] = {"U8", 1},
};

int rs_st_dtype_size(rs_st_dtype d) { return (unsigned)d < RS_ST_DTYPE_COUNT ? dtypes[d].size : 0; }
const char *rs_st_dtype_name(rs_st_dtype d) { return (unsigned)d < RS_ST_DTYPE_COUNT ? dtypes[d].name : "?"; }

/* Bytes of a tensor, or -1 on overflow. */
static int64_t tensor_bytes(rs_st_dtype d, int ndim, const int64_t *shape)
{
	uint64_t n = (uint64_t)rs_st_dtype_size(d);
	for (int k = 0; k < ndim; k++) {
		if (shape[k] < 0 || (shape[k] > 0 && n > (UINT64_MAX >> 2) / (uint64_t)shape[k]))
			return -1;
		n *= (uint64_t)shape[k];
	}
	return n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

/* What rs_st_write puts in the file after the header. */
typedef struct st_body {
	const char *header;     /* padded to a multiple of 8 */
	size_t header_len;
	const rs_st_tensor_in *tensors;
	int n;
	uint32_t crc;           /* CRC-32C of the bytes written so far */
	int64_t bytes;
} st_body;

static rs_status put(int fd, st_body *b, const void *p, size_t n)
{
	b->crc = rs_crc32c(b->crc, p, n);
	b->bytes += (int64_t)n;
	return rs_file_write_all(fd, p, n);
}

static rs_status write_body(int fd, void *ctx)
{
	st_body *b = ctx;
	uint64_t hlen = b->header_len;
	b->crc = 0, b->bytes = 0; /* a retried write starts over */
	RSCHECK(put(fd, b, &hlen, 8));
	RSCHECK(put(fd, b, b->header, b->header_len));
	for (int i = 0; i < b->n; i++)
		RSCHECK(put(fd, b, b->tensors[i].data,
			    (size_t)tensor_bytes(b->tensors[i].dtype, b->tensors[i].ndim, b->tensors[i].shape)));
	return RS_OK;
}

rs_status rs_st_write(const char *path, const rs_st_tensor_in *tensors, int n, const json_t *metadata, rs_err *err)
{
	rs_file_batch one = {0};
	rs_status st = rs_st_write_crc(&one, path, tensors, n, metadata, NULL, NULL, err);
	if (st != RS_OK) {
		rs_file_batch_free(&one);
		return st;
	}
	return rs_file_batch_commit(&one, err);
}

rs_status rs_st_write_crc(rs_file_batch *batch, const char *path, const rs_st_tensor_in *tensors, int n,
			  const json_t *metadata, uint32_t *crc, int64_t *size, rs_err *err)
{
	json_t *hdr = json_object();
	char *text = NULL;
	rs_status st = RS_OK;
	uint64_t off = 0;

	RSALLOCGOTO(hdr, st, out);
	if (metadata && json_object_set(hdr, "__metadata__", (json_t *)metadata) != 0)
		RSFAILGOTO(st, RS_ENOMEM, out);
	for (int i = 0; i < n; i++) {
		int64_t bytes = tensor_bytes(tensors[i].dtype, tensors[i].ndim, tensors[i].shape);
		json_t *shape = json_array();
		if (bytes < 0 || !shape) {
			json_decref(shape);
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: tensor '%s': bad shape", path, tensors[i].name), out);
		}
		for (int k = 0; k < tensors[i].ndim; k++)
			json_array_append_new(shape, json_integer(tensors[i].shape[k]));
		json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", rs_st_dtype_name(tensors[i].dtype), "shape", shape,
				      "data_offsets", (json_int_t)off, (json_int_t)(off + (uint64_t)bytes));
		if (!e || json_object_set_new(hdr, tensors[i].name, e) != 0)
			RSFAILGOTO(st, RS_ENOMEM, out);
		off += (uint64_t)bytes;
	}
	RSALLOCGOTO(text = json_dumps(hdr, JSON_COMPACT), st, out);
	size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
	char *p = realloc(text, padded + 1);
	RSALLOCGOTO(p, st, out);
	text = p;
	memset(text + len, ' ', padded - len);
	st_body body = {text, padded, tensors, n, 0, 0};
	st = rs_file_batch_write(batch, path, 0600, write_body, &body, err); /* checkpoints are the owner's */
	if (crc)
		*crc = body.crc;
	if (size)
		*size = body.bytes;
out:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "%s: out of memory", path);
	free(text);
	json_decref(hdr);
	return st;
}

static int cmp_begin(const void *a, const void *b)
{
	const rs_st_tensor *x = a, *y = b;
	return (x->begin > y->begin) - (x->begin < y->begin);
}

void rs_st_close(rs_st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->ntensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	json_decref(f->metadata);
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f);
}

static rs_status parse_entry(const char *file, const char *key, json_t *v, rs_st_tensor *t, rs_err *err)
{
	json_t *dt, *shape, *offs;
	json_error_t jerr;
	if (json_unpack_ex(v, &jerr, JSON_STRICT, "{s:o, s:o, s:o}", "dtype", &dt, "shape", &shape, "data_offsets",
			   &offs) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': %s", file, key, jerr.text);
	t->dtype = RS_ST_DTYPE_COUNT;
	for (int d = 0; json_is_string(dt) && d < RS_ST_DTYPE_COUNT; d++)
		if (!strcmp(json_string_value(dt), dtypes[d].name))
			t->dtype = (rs_st_dtype)d;
	if (t->dtype == RS_ST_DTYPE_COUNT)
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': unknown dtype", file, key);
	if (!json_is_array(shape) || json_array_size(shape) > RS_ST_MAX_DIMS)
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': shape must be an array of at most %d sizes", file, key,
				  RS_ST_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	for (int k = 0; k < t->ndim; k++) {
		json_t *s = json_array_get(shape, (size_t)k);
		if (!json_is_integer(s) || json_integer_value(s) < 0)
			return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': shape[%d] is not a size", file, key, k);
		t->shape[k] = json_integer_value(s);
	}
	if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
	    !json_is_integer(json_array_get(offs, 1)) || json_integer_value(json_array_get(offs, 0)) < 0 ||
	    json_integer_value(json_array_get(offs, 1)) < json_integer_value(json_array_get(offs, 0)))
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': data_offsets must be [begin, end] with begin <= end",
				  file, key);
	t->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
	t->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
	int64_t bytes = tensor_bytes(t->dtype, t->ndim, t->shape);
	if (bytes < 0 || (uint64_t)bytes != t->end - t->begin)
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': shape and dtype need %lld bytes, offsets give %llu", file,
				  key, (long long)bytes, (unsigned long long)(t->end - t->begin));
	return RS_OK;
}

rs_status rs_st_parse(const void *buf, size_t len, uint64_t file_size, const char *name, rs_st_file **out,
		      rs_err *err)
{
	uint64_t hlen;
	json_error_t jerr;
	json_t *root = NULL;
	rs_st_file *f = NULL;
	rs_status st = RS_EINVAL;

	*out = NULL;
	if (len < 8 || file_size < 8)
		return rs_err_set(err, RS_EINVAL, "%s: too short for a safetensors file", name);
	memcpy(&hlen, buf, 8);
	if (hlen > RS_ST_MAX_HEADER || hlen > file_size - 8 || hlen > len - 8)
		return rs_err_set(err, RS_EINVAL, "%s: header length %llu does not fit the file", name,
				  (unsigned long long)hlen);
	root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return rs_err_set(err, RS_EINVAL, "%s: header: %s", name, jerr.text);
	if (!json_is_object(root)) {
		st = rs_err_set(err, RS_EINVAL, "%s: header is not a JSON object", name);
		goto fail;
	}
	f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(name)) ||
	    !(f->tensors = calloc(json_object_size(root) + 1, sizeof(rs_st_tensor)))) {
		st = RS_ENOMEM;
		goto fail;
	}
	f->fd = -1;
	f->data_start = 8 + hlen;
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(v)) {
				st = rs_err_set(err, RS_EINVAL, "%s: __metadata__ must be an object of strings", name);
				goto fail;
			}
			json_object_foreach(v, mk, mv) if (!json_is_string(mv))
			{
				st = rs_err_set(err, RS_EINVAL, "%s: __metadata__ '%s' is not a string", name, mk);
				goto fail;
			}
			f->metadata = json_incref(v);
			continue;
		}
		rs_st_tensor *t = &f->tensors[f->ntensors];
		RSCHECKGOTO(parse_entry(name, key, v, t, err), st, fail);
		if (!(t->name = strdup(key))) {
			st = RS_ENOMEM;
			goto fail;
		}
		f->ntensors++;
	}
	/* the tensors must tile the data buffer exactly */
	rs_st_tensor *sorted = malloc(sizeof(rs_st_tensor) * (size_t)(f->ntensors + 1));
	if (!sorted) {
		st = RS_ENOMEM;
		goto fail;
	}
	memcpy(sorted, f->tensors, sizeof(rs_st_tensor) * (size_t)f->ntensors);
	qsort(sorted, (size_t)f->ntensors, sizeof(rs_st_tensor), cmp_begin);
	uint64_t at = 0;
	for (int i = 0; i < f->ntensors; i++) {
		if (sorted[i].begin != at) {
			st = rs_err_set(err, RS_EINVAL, "%s: tensor '%s' starts at %llu, expected %llu (%s)", name,
					sorted[i].name, (unsigned long long)sorted[i].begin, (unsigned long long)at,
					sorted[i].begin < at ? "overlap" : "hole");
			free(sorted);
			goto fail;
		}
		at = sorted[i].end;
	}
	free(sorted);
	if (at != file_size - f->data_start) {
		st = rs_err_set(err, RS_EINVAL, "%s: tensors cover %llu bytes, the data buffer has %llu", name,
				(unsigned long long)at, (unsigned long long)(file_size - f->data_start));
		goto fail;
	}
	json_decref(root);
	*out = f;
	return RS_OK;
fail:
	json_decref(root);
	rs_st_close(f);
	return st;
}

rs_status rs_st_open(const char *path, rs_st_file **out, rs_err *err)
{
	struct stat sb;
	uint64_t hlen;
	char *hdr = NULL;
	rs_status st;
	int fd;
	*out = NULL;
	/* never through a link, never blocked by a FIFO: a file in a checkpoint is untrusted */
	RSCHECK(rs_file_open_regular(path, 1, &fd, err));
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno));
	}
	if (pread(fd, &hlen, 8, 0) != 8) {
		close(fd);
		return rs_err_set(err, RS_EINVAL, "%s: too short for a safetensors file", path);
	}
	if (hlen > RS_ST_MAX_HEADER || hlen > (uint64_t)sb.st_size - 8) {
		close(fd);
		return rs_err_set(err, RS_EINVAL, "%s: header length %llu does not fit the file", path,
				  (unsigned long long)hlen);
	}
	hdr = malloc(8 + hlen);
	if (!hdr || pread(fd, hdr, 8 + hlen, 0) != (ssize_t)(8 + hlen)) {
		free(hdr);
		close(fd);
		return rs_err_set(err, RS_EIO, "%s: cannot read the header", path);
	}
	st = rs_st_parse(hdr, 8 + hlen, (uint64_t)sb.st_size, path, out, err);
	free(hdr);
	if (st != RS_OK) {
		close(fd);
		return st;
	}
	(*out)->fd = fd;
	return RS_OK;
}

int rs_st_find(const rs_st_file *f, const char *name)
{
	for (int i = 0; i < f->ntensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return i;
	return -1;
}

rs_status rs_st_read_range(const rs_st_file *f, int i, uint64_t offset, uint64_t len, void *dst, rs_err *err)
{
	const rs_st_tensor *t = &f->tensors[i];
	uint64_t done = 0;
	if (f->fd < 0 || offset > t->end - t->begin || len > t->end - t->begin - offset)
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s': bytes %llu..+%llu are outside it", f->path, t->name,
				  (unsigned long long)offset, (unsigned long long)len);
	while (done < len) {
		ssize_t n = pread(f->fd, (char *)dst + done, len - done, (off_t)(f->data_start + t->begin + offset + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return rs_err_set(err, RS_EIO, "%s: tensor '%s': short read", f->path, t->name);
		done += (uint64_t)n;
	}
	return RS_OK;
}

rs_status rs_st_read(const rs_st_file *f, int i, void *dst, rs_err *err)
{
	return rs_st_read_range(f, i, 0, f->tensors[i].end - f->tensors[i].begin, dst, err);
}
