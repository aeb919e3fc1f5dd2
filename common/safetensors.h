/*
 * safetensors.h - files in the safetensors format, which Python users read
 * with the tools they already have: an 8-byte little-endian header length
 * N, N bytes of JSON header (padded with spaces to a multiple of 8), then
 * the tensors' raw little-endian bytes. The header maps each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
 * buffer) and may hold "__metadata__", an object of strings.
 *
 * Writing is atomic: the file is written as PATH.tmp, synced and renamed,
 * so a crash never leaves a partial file under the real name. Reading
 * validates everything before any tensor is read: header size, JSON,
 * every entry's keys, dtypes, shapes against sizes, offsets inside the
 * buffer, no overlaps, no holes, unique names (as the reference
 * implementation requires). Errors name the file and the tensor.
 */
#ifndef RS_SAFETENSORS_H
#define RS_SAFETENSORS_H

#include "common/file.h"
#include "common/status.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RS_ST_MAX_HEADER (100u << 20)
#define RS_ST_MAX_DIMS 8

typedef enum rs_st_dtype {
	RS_ST_F32 = 0,
	RS_ST_F16,
	RS_ST_BF16,
	RS_ST_F64,
	RS_ST_I64,
	RS_ST_I32,
	RS_ST_U32,
	RS_ST_U8,
	RS_ST_DTYPE_COUNT
} rs_st_dtype;

int rs_st_dtype_size(rs_st_dtype d);
const char *rs_st_dtype_name(rs_st_dtype d); /* "F32", ... */

/* A tensor to write: its bytes are data[0 .. product(shape) * dtype size). */
typedef struct rs_st_tensor_in {
	const char *name;
	rs_st_dtype dtype;
	int ndim;
	int64_t shape[RS_ST_MAX_DIMS];
	const void *data;
} rs_st_tensor_in;

/* Write the tensors (and optional metadata, an object of strings) to path, atomically. */
rs_status rs_st_write(const char *path, const rs_st_tensor_in *tensors, int n, const json_t *metadata, rs_err *err);

/*
 * The same, also giving the file's CRC-32C (rs_crc32c, from 0) and size in
 * bytes (either may be NULL), into a batch of files made durable together
 * (common/file.h: the file is in place once the caller commits the batch).
 */
rs_status rs_st_write_crc(rs_file_batch *batch, const char *path, const rs_st_tensor_in *tensors, int n,
			  const json_t *metadata, uint32_t *crc, int64_t *size, rs_err *err);

typedef struct rs_st_tensor {
	char *name;
	rs_st_dtype dtype;
	int ndim;
	int64_t shape[RS_ST_MAX_DIMS];
	uint64_t begin, end;  /* within the data buffer */
} rs_st_tensor;

typedef struct rs_st_file {
	char *path;
	int fd;               /* -1 for a file parsed from memory */
	uint64_t data_start;  /* file offset of the data buffer */
	rs_st_tensor *tensors;
	int ntensors;
	json_t *metadata;     /* owned; NULL when absent */
} rs_st_file;

/*
 * Validate a header given the first bytes of a file (at least 8 + N, or the
 * whole file) and the file's total size. On success *out owns a new rs_st_file
 * with fd -1. `name` names the source in messages.
 */
rs_status rs_st_parse(const void *buf, size_t len, uint64_t file_size, const char *name, rs_st_file **out,
		      rs_err *err);

rs_status rs_st_open(const char *path, rs_st_file **out, rs_err *err);
void rs_st_close(rs_st_file *f);

/* Index of a tensor by name, or -1. */
int rs_st_find(const rs_st_file *f, const char *name);

/* Read tensor i's bytes into dst (end - begin bytes). */
rs_status rs_st_read(const rs_st_file *f, int i, void *dst, rs_err *err);

/* Read len bytes of tensor i from byte `offset` of it into dst; RS_EINVAL when that leaves the tensor. */
rs_status rs_st_read_range(const rs_st_file *f, int i, uint64_t offset, uint64_t len, void *dst, rs_err *err);

#endif
