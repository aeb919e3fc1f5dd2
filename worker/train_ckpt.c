/*
 * train_ckpt.c - the trainer's model to and from files: checkpoints in the
 * safetensors format (rs_trainer_save, rs_trainer_load; see
 * common/checkpoint.h for the layout) and the raw dump the tests compare
 * across world sizes (rs_trainer_dump). Part of the trainer (train.h);
 * reaches its insides through train_internal.h.
 */
#include "worker/train_internal.h"
#include "common/checkpoint.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/safetensors.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

rs_status rs_trainer_dump(const rs_trainer *tr, const char *path)
{
	FILE *f = fopen(path, "wb");
	rs_status st = RS_OK;
	if (!f)
		return RS_EIO;
	for (int i = 0; i < tr->nshards && st == RS_OK; i++) {
		const lshard *ls = &tr->shards[i];
		int32_t hdr32[2] = {ls->table, ls->s.col_offset};
		/* record: int32 table, int32 col_offset, int64 row_offset, int64 rows, int32 cols, floats */
		int64_t hdr64[2] = {ls->s.row_offset, ls->s.rows};
		int32_t cols = ls->s.cols;
		if (fwrite(hdr32, sizeof(hdr32), 1, f) != 1 || fwrite(hdr64, sizeof(hdr64), 1, f) != 1 ||
		    fwrite(&cols, sizeof(cols), 1, f) != 1)
			st = RS_EIO;
		for (int64_t k = 0; st == RS_OK && k < ls->s.rows * cols; k++) {
			float v = rs_emb_get(ls->emb.weights, ls->emb.dtype, k);
			if (fwrite(&v, sizeof(v), 1, f) != 1)
				st = RS_EIO;
		}
	}
	if (st == RS_OK && tr->rank == 0) {
		int32_t hdr32[2] = {-1, 0};
		int64_t hdr64[2] = {0, 1};
		int32_t cols = (int32_t)rs_dense_nparams(tr->dense);
		if (fwrite(hdr32, sizeof(hdr32), 1, f) != 1 || fwrite(hdr64, sizeof(hdr64), 1, f) != 1 ||
		    fwrite(&cols, sizeof(cols), 1, f) != 1 ||
		    fwrite(rs_dense_params(tr->dense), sizeof(float), (size_t)cols, f) != (size_t)cols)
			st = RS_EIO;
	}
	if (fclose(f) != 0)
		st = RS_EIO;
	return st;
}

/* ---- checkpoints -------------------------------------------------------------------- */

static rs_st_dtype st_dtype(rs_dtype d)
{
	return d == RS_DTYPE_FP16 ? RS_ST_F16 : d == RS_DTYPE_BF16 ? RS_ST_BF16 : RS_ST_F32;
}

/* One file of a snapshot: its tensors, copied out of the trainer, and what writing it gave. */
/* The most tensors one file holds: an Adam ZCH shard's weight, exp_avg, exp_avg_sq, zch_ids and zch_meta. */
#define SNAP_TENSORS 5

typedef struct snap_file {
	char name[512];
	rs_st_tensor_in t[SNAP_TENSORS];
	int n;
	void *own[SNAP_TENSORS]; /* the copies the tensors point at */
	size_t size[SNAP_TENSORS];
	json_t *meta;
} snap_file;

struct rs_snapshot {
	snap_file *f;
	int n;
	int64_t dense_params;   /* rank 0: the dense network's; else -1 */
	rs_ckpt_file_report *written; /* per file, after rs_snapshot_write */
	size_t bytes;           /* of the copies */
	size_t reused;          /* of them, in the memory of s->reuse's */
	int borrow;             /* the trainer's own buffers are written as they are (a save that waits for its write) */
	atomic_int cancel;      /* rs_snapshot_cancel: stop before the next file */
	rs_snapshot *reuse;     /* while taken: the earlier snapshot whose copies' memory it takes over */
};

void rs_snapshot_cancel(rs_snapshot *s) { atomic_store(&s->cancel, 1); }

void rs_snapshot_free(rs_snapshot *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n; i++) {
		for (int k = 0; k < s->f[i].n; k++)
			free(s->f[i].own[k]);
		json_decref(s->f[i].meta);
	}
	free(s->f);
	free(s->written);
	rs_snapshot_free(s->reuse);
	free(s);
}

/*
 * A buffer of `bytes` for tensor k of file i: s->reuse's buffer of that
 * size (taken from it; the same place first: a snapshot's copies are the
 * same sizes from one checkpoint to the next in a generation) when it has
 * one, else a new one. A buffer already in use is already mapped: a new
 * one of several MiB comes from mmap (glibc's threshold) and took a page
 * fault per 4 KiB page inside the copy, several times the copy's own cost.
 * A new large one is faulted in at once instead (MADV_POPULATE_WRITE, where
 * the kernel has it), which costs about as much as zeroing it.
 */
#define SNAP_POPULATE ((size_t)1 << 20)

static void *take_reused(rs_snapshot *r, int i, int k, size_t bytes)
{
	if (!r || i >= r->n || k >= r->f[i].n || !r->f[i].own[k] || r->f[i].size[k] != bytes)
		return NULL;
	void *p = r->f[i].own[k];
	r->f[i].own[k] = NULL;
	return p;
}

static void *snap_buffer(rs_snapshot *s, int i, int k, size_t bytes)
{
	rs_snapshot *r = s->reuse;
	void *p = take_reused(r, i, k, bytes);
	for (int ri = 0; !p && r && ri < r->n; ri++)
		for (int rk = 0; !p && rk < r->f[ri].n; rk++)
			p = take_reused(r, ri, rk, bytes);
	if (p) {
		s->reused += bytes;
		return p;
	}
	if (bytes < SNAP_POPULATE)
		return malloc(bytes);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (posix_memalign(&p, page, bytes) != 0)
		return NULL;
#ifdef MADV_POPULATE_WRITE
	(void)madvise(p, bytes / page * page, MADV_POPULATE_WRITE); /* advice: the copy faults in what this did not */
#endif
	return p;
}

/*
 * Add tensor (name, dtype, shape) to f: the `bytes` at src, copied unless
 * the snapshot borrows; src NULL: a buffer of its own for the caller to
 * fill. Returns where the tensor's data is, or NULL without memory.
 */
static void *snap_tensor(rs_snapshot *s, snap_file *f, const char *name, rs_st_dtype dtype, int ndim, int64_t d0,
			 int64_t d1, const void *src, size_t bytes)
{
	RS_ASSERT(f->n < SNAP_TENSORS);
	void *p = src && s->borrow ? (void *)src : snap_buffer(s, (int)(f - s->f), f->n, bytes ? bytes : 1);
	if (!p)
		return NULL;
	if (p != src && src)
		memcpy(p, src, bytes);
	f->own[f->n] = p == src ? NULL : p;
	f->size[f->n] = bytes ? bytes : 1;
	if (p != src)
		s->bytes += bytes;
	f->t[f->n++] = (rs_st_tensor_in){name, dtype, ndim, {d0, d1}, p};
	return p;
}

/* The tensors of a shard's file (see common/checkpoint.h), copied. */
static rs_status snap_shard(const rs_trainer *tr, const lshard *ls, rs_snapshot *s, snap_file *f)
{
	const rs_config *cfg = tr->cfg;
	const rs_table_config *tc = &cfg->tables[ls->table];
	const tinfo *ti = &tr->tables[ls->table];
	int64_t rows = ls->s.rows, cols = ls->s.cols;
	size_t cells = (size_t)(rows * cols);
	if (!snap_tensor(s, f, "weight", st_dtype(tc->dtype), 2, rows, cols, ls->emb.weights,
			 cells * (size_t)rs_dtype_size(tc->dtype)))
		return RS_ENOMEM;
	if (cfg->optimizer.kind == RS_OPT_ROWWISE_ADAGRAD) {
		if (!snap_tensor(s, f, "momentum1", RS_ST_F32, 1, rows, 0, ls->emb.state, sizeof(float) * (size_t)rows))
			return RS_ENOMEM;
	} else if (cfg->optimizer.kind == RS_OPT_ADAM) {
		/* the state interleaves m and v per row; the file keeps them apart, as PyTorch names them */
		float *m = snap_tensor(s, f, "exp_avg", RS_ST_F32, 2, rows, cols, NULL, sizeof(float) * cells);
		float *v = m ? snap_tensor(s, f, "exp_avg_sq", RS_ST_F32, 2, rows, cols, NULL, sizeof(float) * cells) : NULL;
		if (!v)
			return RS_ENOMEM;
		for (int64_t r = 0; r < rows; r++) {
			memcpy(m + r * cols, ls->emb.state + r * 2 * cols, sizeof(float) * (size_t)cols);
			memcpy(v + r * cols, ls->emb.state + r * 2 * cols + cols, sizeof(float) * (size_t)cols);
		}
	}
	if (ti->zch) {
		int64_t *ids = snap_tensor(s, f, "zch_ids", RS_ST_I64, 1, rows, 0, NULL, sizeof(int64_t) * (size_t)rows);
		if (!ids)
			return RS_ENOMEM;
		uint32_t *meta = snap_tensor(s, f, "zch_meta", RS_ST_U32, 2, rows, 3, NULL, sizeof(uint32_t) * 3 * (size_t)rows);
		if (!meta)
			return RS_ENOMEM;
		for (int64_t r = 0; r < rows; r++) {
			int live;
			uint64_t id = rs_zch_slot_id(ti->zch, ls->s.row_offset + r, &live);
			ids[r] = live ? (int64_t)id : -1;
			rs_zch_slot_meta(ti->zch, ls->s.row_offset + r, meta + 3 * r);
		}
	}
	char ro[32], co[32];
	snprintf(ro, sizeof(ro), "%lld", (long long)ls->s.row_offset);
	snprintf(co, sizeof(co), "%d", ls->s.col_offset);
	f->meta = json_pack("{s:s, s:s, s:s, s:s}", "table", tc->name, "sharding",
			    rs_sharding_name(tr->plan->tables[ls->table].sharding), "row_offset", ro, "col_offset", co);
	if (!f->meta)
		return RS_ENOMEM;
	rs_checkpoint_shard_file(tc, &ls->s, f->name, sizeof(f->name));
	return RS_OK;
}

/*
 * The snapshot of rs_trainer_snapshot; borrow: pointing at the trainer's
 * buffers, valid until it trains again. reuse (freed) as there.
 */
static rs_status snapshot(rs_trainer *tr, int borrow, rs_snapshot *reuse, rs_snapshot **out, rs_err *err)
{
	rs_snapshot *s = calloc(1, sizeof(*s));
	rs_status st = RS_OK;
	*out = NULL;
	if (!s || !(s->f = calloc((size_t)tr->nshards + 1, sizeof(*s->f)))) {
		rs_snapshot_free(reuse);
		RSFAILGOTO(st, RS_ENOMEM, out);
	}
	s->dense_params = -1;
	s->borrow = borrow;
	s->reuse = reuse;
	rs__trainer_prefetch(tr, 1);
	for (int i = 0; i < tr->nshards; i++) {
		const lshard *ls = &tr->shards[i];
		if (!rs__counted(tr, i))
			continue; /* one copy of each row is enough */
		RSCHECKGOTO(snap_shard(tr, ls, s, &s->f[s->n++]), st, out);
	}
	if (tr->rank == 0) {
		snap_file *f = &s->f[s->n++];
		size_t n = rs_dense_nparams(tr->dense);
		snprintf(f->name, sizeof(f->name), "dense.safetensors");
		if (!snap_tensor(s, f, "params", RS_ST_F32, 1, (int64_t)n, 0, rs_dense_params(tr->dense), sizeof(float) * n))
			RSFAILGOTO(st, RS_ENOMEM, out);
		s->dense_params = (int64_t)n;
	}
	rs_snapshot_free(s->reuse); /* what it had that this one did not take */
	s->reuse = NULL;
	*out = s;
	return RS_OK;
out:
	rs_snapshot_free(s);
	return rs_err_set(err, st, "checkpoint: copying this rank's shards: %s", rs_status_str(st));
}

rs_status rs_trainer_snapshot(rs_trainer *tr, rs_snapshot *reuse, rs_snapshot **out, rs_err *err)
{
	return snapshot(tr, 0, reuse, out, err);
}

int64_t rs_checkpoint_stall_ms_for_tests;
int64_t rs_checkpoint_stall_step_for_tests = -1;

/* The test hook's stall applies to this checkpoint (every one, or the one of its step). */
static int stalls(const char *dir)
{
	if (rs_checkpoint_stall_ms_for_tests <= 0)
		return 0;
	if (rs_checkpoint_stall_step_for_tests < 0)
		return 1;
	char want[32];
	snprintf(want, sizeof(want), "step-%09lld", (long long)rs_checkpoint_stall_step_for_tests);
	const char *base = strrchr(dir, '/');
	return !strcmp(base ? base + 1 : dir, want);
}

/*
 * Every file written, then all made durable at once (common/file.h's
 * batch): a journal commit or two for the lot, not one a file.
 */
rs_status rs_snapshot_write(rs_snapshot *s, const char *dir, rs_err *err)
{
	char path[4096];
	rs_file_batch batch = {0};
	rs_status st = RS_OK;
	free(s->written);
	if (!(s->written = calloc((size_t)s->n + 1, sizeof(*s->written))))
		return rs_err_set(err, RS_ENOMEM, "checkpoint %s: out of memory", dir);
	for (int i = 0; i < s->n && st == RS_OK; i++) {
		snap_file *f = &s->f[i];
		rs_ckpt_file_report *w = &s->written[i];
		if (atomic_load(&s->cancel)) {
			st = rs_err_set(err, RS_EABORTED, "cancelled after %d of its %d files", i, s->n);
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, f->name);
		w->file = f->name;
		st = rs_st_write_crc(&batch, path, f->t, f->n, f->meta, &w->crc32c, &w->bytes, err);
		if (st == RS_OK && i == 0 && stalls(dir))
			rs_sleep((double)rs_checkpoint_stall_ms_for_tests / 1000.0);
	}
	if (st != RS_OK) {
		rs_file_batch_free(&batch); /* nothing of it in place */
		return st;
	}
	return rs_file_batch_commit(&batch, err); /* the files are in place, durably, when this returns */
}

int rs_snapshot_files(const rs_snapshot *s, const rs_ckpt_file_report **files)
{
	*files = s->written;
	return s->written ? s->n : 0;
}

int64_t rs_snapshot_dense_params(const rs_snapshot *s) { return s->dense_params; }
size_t rs_snapshot_bytes(const rs_snapshot *s) { return s->bytes; }
size_t rs_snapshot_reused(const rs_snapshot *s) { return s->reused; }

/*
 * Whether every rank did what it had to (`what`, for the message), its own
 * failure first: all learn it, so none goes on unless all can.
 */
static rs_status all_did(rs_trainer *tr, rs_status st, const char *dir, const char *what, rs_err *err)
{
	int64_t failed = st != RS_OK;
	rs_status bst = rs_transport_allreduce_i64(tr->t, &failed, 1);
	if (st != RS_OK)
		return st;
	if (bst != RS_OK)
		return rs_err_set(err, bst, "checkpoint %s: waiting for the other ranks to %s: %s", dir, what,
				  rs_transport_error(tr->t));
	if (failed > 0)
		return rs_err_set(err, RS_EIO, "checkpoint %s: %lld other rank(s) could not %s", dir, (long long)failed, what);
	return RS_OK;
}

int64_t rs_save_floor_bytes_per_s_for_tests;

/*
 * How long a rank waits for the others at the final save: the transport's
 * own bound, plus the whole model (what all ranks write together: every
 * row once, with its optimizer state and ZCH metadata) at 10 MiB/s, as the
 * ranks may share one disk or volume (slower than any we expect). A rank
 * with more rows, or a slower disk, is waited for (with the bound alone, a
 * save whose part took 30 s more on one rank failed on all), and one that
 * hangs is still given up on. The same on every rank: it needs only the
 * config.
 */
static int save_wait_ms(const rs_config *cfg, int bound_ms)
{
	int64_t floor = rs_save_floor_bytes_per_s_for_tests > 0 ? rs_save_floor_bytes_per_s_for_tests : 10 << 20;
	int64_t total = 0;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_config *tc = &cfg->tables[t];
		int64_t zch = tc->has_zch ? sizeof(int64_t) + 3 * sizeof(uint32_t) : 0; /* zch_ids, zch_meta */
		total += tc->rows * ((int64_t)rs_table_row_bytes(cfg, tc) + zch);
	}
	int64_t ms = bound_ms + total / floor * 1000 + total % floor * 1000 / floor;
	return ms < INT_MAX / 2 ? (int)ms : INT_MAX / 2;
}

/*
 * The final save, at the end of the job: once every rank has its part in
 * hand, rank 0 removes an earlier save's index before any rank writes, and
 * writes the new one once every rank's files are in place (so a save that
 * fails part-way, or a rank that dies, leaves no index naming a model that
 * is not whole, and one that fails before writing leaves the earlier save
 * as it was). Every rank says how each stage went, and a rank that returns
 * RS_OK (then says "done") knows the whole model is on disk with its index:
 * the coordinator counts on it when a peer is lost after the end.
 */
rs_status rs_trainer_save(rs_trainer *tr, const char *dir, int64_t step, rs_err *err)
{
	rs_snapshot *s = NULL;
	int was = rs_transport_timeout(tr->t, 0);
	rs_transport_timeout(tr->t, save_wait_ms(tr->cfg, was));
	rs_status st = snapshot(tr, 1, NULL, &s, err); /* the trainer's own buffers where it can: written before training goes on */
	RSCHECKGOTO(all_did(tr, st, dir, "take their part out", err), st, out);
	st = tr->rank == 0 ? rs_checkpoint_drop_index(dir, err) : RS_OK;
	RSCHECKGOTO(all_did(tr, st, dir, "remove the earlier index", err), st, out);
	st = rs_snapshot_write(s, dir, err);
	RSCHECKGOTO(all_did(tr, st, dir, "write their part", err), st, out);
	st = tr->rank == 0 ? rs_checkpoint_write_index(dir, tr->cfg, tr->plan, step, rs_dense_nparams(tr->dense), NULL, err)
			   : RS_OK;
	st = all_did(tr, st, dir, "write the index", err);
out:
	rs_transport_timeout(tr->t, was);
	rs_snapshot_free(s);
	return st;
}

/* ---- loading a checkpoint ----------------------------------------------------------- */

/* Tensor `name` of f, checked to be dtype with `rows` rows of `cols` (cols 0: a vector); its index. */
static rs_status find_tensor(const rs_st_file *f, const char *name, rs_st_dtype dtype, int64_t rows, int64_t cols,
			     int *out, rs_err *err)
{
	int k = rs_st_find(f, name);
	if (k < 0)
		return rs_err_set(err, RS_EINVAL, "%s: no tensor '%s'", f->path, name);
	const rs_st_tensor *t = &f->tensors[k];
	if (t->dtype != dtype || t->ndim != (cols ? 2 : 1) || t->shape[0] != rows || (cols && t->shape[1] != cols))
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s' is not %s [%lld%s%lld]", f->path, name,
				  rs_st_dtype_name(dtype), (long long)rows, cols ? ", " : "", (long long)cols);
	*out = k;
	return RS_OK;
}

/*
 * The ZCH identities of rows [lo, hi) (whole buckets of spb slots) from the
 * checkpoint shard in f (nr rows from table row r0) into z: "zch_ids", and
 * "zch_meta" (the eviction metadata) when the file has it.
 */
static rs_status load_zch(rs_zch_table *z, int64_t spb, const rs_st_file *f, int64_t r0, int64_t nr, int64_t lo,
			  int64_t hi, rs_err *err)
{
	int64_t n = hi - lo, from = lo - r0;
	int k, km = -1;
	if (lo % spb || hi % spb)
		return rs_err_set(err, RS_EINVAL, "%s: rows %lld..%lld do not cover whole ZCH buckets of %lld slots", f->path,
				  (long long)lo, (long long)hi - 1, (long long)spb);
	RSCHECK(find_tensor(f, "zch_ids", RS_ST_I64, nr, 0, &k, err));
	if (rs_st_find(f, "zch_meta") >= 0)
		RSCHECK(find_tensor(f, "zch_meta", RS_ST_U32, nr, 3, &km, err));
	int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
	uint32_t *meta = km >= 0 ? malloc(sizeof(uint32_t) * 3 * (size_t)n) : NULL;
	rs_status st = ids && (km < 0 || meta) ? RS_OK : rs_err_set(err, RS_ENOMEM, "%s: out of memory", f->path);
	if (st == RS_OK)
		st = rs_st_read_range(f, k, (uint64_t)from * 8, (uint64_t)n * 8, ids, err);
	if (st == RS_OK && meta)
		st = rs_st_read_range(f, km, (uint64_t)from * 12, (uint64_t)n * 12, meta, err);
	for (int64_t b = 0; st == RS_OK && b < n / spb; b++) {
		rs_err why = {0};
		if ((st = rs_zch_bucket_restore(z, (uint32_t)((lo / spb) + b), ids + b * spb, meta ? meta + 3 * b * spb : NULL,
						&why)) != RS_OK)
			rs_err_set(err, st, "%s: %s", f->path, why.msg);
	}
	free(ids);
	free(meta);
	return st;
}

/* Rows [lo, hi) of the checkpoint shard (file f, starting at table row r0) into local shard ls. */
static rs_status load_rows(const rs_trainer *tr, const lshard *ls, const rs_st_file *f, int64_t r0, int64_t nr,
			   int64_t lo, int64_t hi, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	int64_t cols = ls->s.cols, n = hi - lo, at = lo - ls->s.row_offset, from = lo - r0;
	size_t wb = (size_t)cols * (size_t)rs_dtype_size(ls->emb.dtype);
	int k;
	RSCHECK(find_tensor(f, "weight", st_dtype(ls->emb.dtype), nr, cols, &k, err));
	RSCHECK(rs_st_read_range(f, k, (uint64_t)from * wb, (uint64_t)n * wb, (char *)ls->emb.weights + (size_t)at * wb,
				 err));
	if (cfg->optimizer.kind == RS_OPT_ROWWISE_ADAGRAD) {
		RSCHECK(find_tensor(f, "momentum1", RS_ST_F32, nr, 0, &k, err));
		RSCHECK(rs_st_read_range(f, k, (uint64_t)from * 4, (uint64_t)n * 4, ls->emb.state + at, err));
	} else if (cfg->optimizer.kind == RS_OPT_ADAM) {
		/* the file keeps m and v apart; the shard interleaves them per row */
		static const char *const names[2] = {"exp_avg", "exp_avg_sq"};
		float *tmp = malloc(sizeof(float) * (size_t)(n * cols + 1));
		rs_status st = tmp ? RS_OK : RS_ENOMEM;
		for (int which = 0; st == RS_OK && which < 2; which++) {
			st = find_tensor(f, names[which], RS_ST_F32, nr, cols, &k, err);
			if (st == RS_OK)
				st = rs_st_read_range(f, k, (uint64_t)(from * cols) * 4, (uint64_t)(n * cols) * 4, tmp, err);
			for (int64_t r = 0; st == RS_OK && r < n; r++)
				memcpy(ls->emb.state + (at + r) * 2 * cols + which * cols, tmp + r * cols, sizeof(float) * (size_t)cols);
		}
		free(tmp);
		RSCHECK(st);
	}
	const tinfo *ti = &tr->tables[ls->table];
	if (ti->zch)
		RSCHECK(load_zch(ti->zch, ti->spb, f, r0, nr, lo, hi, err));
	return RS_OK;
}

/*
 * Fill table rows [from, to) of local shard ls from the checkpoint's shards
 * of its table (validated: they tile it) that overlap them.
 */
static rs_status load_shard_rows(const rs_trainer *tr, const lshard *ls, const char *dir, const rs_ckpt_table *ct,
				 int64_t from, int64_t to, int verify, rs_err *err)
{
	const rs_table_config *tc = &tr->cfg->tables[ls->table];
	int64_t covered = 0;
	for (int i = 0; i < ct->nshards; i++) {
		const rs_ckpt_shard *cs = &ct->shards[i];
		int64_t lo = cs->row_offset > from ? cs->row_offset : from;
		int64_t hi = cs->row_offset + cs->rows < to ? cs->row_offset + cs->rows : to;
		int cols_overlap = cs->col_offset < ls->s.col_offset + ls->s.cols && ls->s.col_offset < cs->col_offset + cs->cols;
		if (lo >= hi || !cols_overlap)
			continue;
		if (cs->col_offset != ls->s.col_offset || cs->cols != ls->s.cols)
			return rs_err_set(err, RS_EUNSUPPORTED,
					  "%s: table '%s': the checkpoint's column blocks (%d+%d) are not this plan's (%d+%d)",
					  dir, tc->name, cs->col_offset, cs->cols, ls->s.col_offset, ls->s.cols);
		char path[4096];
		rs_st_file *f;
		snprintf(path, sizeof(path), "%s/%s", dir, cs->file);
		if (verify)
			RSCHECK(rs_checkpoint_verify_file(dir, cs->file, &cs->sum, err));
		RSCHECK(rs_st_open(path, &f, err));
		rs_status st = load_rows(tr, ls, f, cs->row_offset, cs->rows, lo, hi, err);
		rs_st_close(f);
		RSCHECK(st);
		covered += hi - lo;
	}
	if (covered != to - from) /* cannot happen with a tiling index: a last guard */
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': the checkpoint covers %lld of rows %lld..%lld once (%lld rows)",
				  dir, tc->name, (long long)covered, (long long)from, (long long)to - 1, (long long)(to - from));
	return RS_OK;
}

/* The checkpoint's entry for the table of local shard ls, checked to have this config's shape, dtype and optimizer. */
static rs_status ckpt_table_of(const rs_trainer *tr, const lshard *ls, const char *dir, const rs_ckpt_index *ix,
			       const rs_ckpt_table **out, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	const rs_table_config *tc = &cfg->tables[ls->table];
	const rs_ckpt_table *ct = rs_checkpoint_index_table(ix, tc->name);
	if (!ct || ct->rows != tc->rows || ct->dim != tc->dim || ct->dtype != tc->dtype ||
	    ct->optimizer != cfg->optimizer.kind)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': not in the checkpoint with this config's shape, "
				  "dtype and optimizer", dir, tc->name);
	*out = ct;
	return RS_OK;
}

rs_status rs__trainer_restore(const rs_trainer *tr, const lshard *ls, const char *dir, const rs_ckpt_index *ix,
			      int64_t from, int64_t to, int verify, rs_err *err)
{
	const rs_ckpt_table *ct = NULL;
	RSCHECK(ckpt_table_of(tr, ls, dir, ix, &ct, err));
	return load_shard_rows(tr, ls, dir, ct, from, to, verify, err);
}

rs_status rs_trainer_load(rs_trainer *tr, const char *dir, int64_t *step, rs_err *err)
{
	rs_ckpt_index ix;
	rs_st_file *f = NULL;
	rs_status st = RS_OK;
	RSCHECK(rs_checkpoint_index_read(dir, &ix, err)); /* read once, validated, and only that copy acted on */
	rs__trainer_prefetch(tr, 1);
	for (int i = 0; i < tr->nshards; i++) {
		const lshard *ls = &tr->shards[i];
		RSCHECKGOTO(rs__trainer_restore(tr, ls, dir, &ix, ls->s.row_offset, ls->s.row_offset + ls->s.rows, 1, err),
			    st, out);
	}
	char path[4096];
	int k;
	size_t n = rs_dense_nparams(tr->dense);
	if (ix.dense_params != (int64_t)n)
		RSFAILGOTO(st,
			   rs_err_set(err, RS_EINVAL, "%s: the checkpoint's dense network has %lld parameters, this config's %zu",
				      dir, (long long)ix.dense_params, n),
			   out);
	snprintf(path, sizeof(path), "%s/%s", dir, ix.dense_file);
	RSCHECKGOTO(rs_checkpoint_verify_file(dir, ix.dense_file, &ix.dense_sum, err), st, out);
	RSCHECKGOTO(rs_st_open(path, &f, err), st, out);
	RSCHECKGOTO(find_tensor(f, "params", RS_ST_F32, (int64_t)n, 0, &k, err), st, out);
	RSCHECKGOTO(rs_st_read(f, k, rs_dense_params(tr->dense), err), st, out);
	*step = ix.step;
	tr->updates = ix.step; /* one optimizer update per step */
out:
	rs_st_close(f);
	rs_checkpoint_index_free(&ix);
	return st;
}
