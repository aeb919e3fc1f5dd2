#!/usr/bin/env python3
"""mutate.py - plant bugs in the CUDA code and show the simulated tests catch each one.

    python3 tests/cudasim/mutate.py [--only NAME,...] [--seed N] [--kernels-only] [--list]

Run from the repository root after `make cudasim` (BUILD=DIR as for make). For
every mutation below it copies kernels/cuda/*.cu and worker/engine_cuda.c to
$BUILD/cudasim-mutate/NAME/src, plants the one bug in the copy (the sources are
never touched), builds the simulated kernel tests and worker from the copy
(make with CUDASIM pointing there), runs test_bucketize_cuda,
test_embedding_cuda and test_zch_cuda, then train_gpu.sh (18 steps, as make
test runs it) when they all passed (or always, with --all-tests), and prints a
table: the bug, where it was planted, and the tests that failed.

Each mutation ends as one of: caught (a test failed), did not compile (the
planted copy does not build: not a catch, the mutation needs fixing), or
missed. Anything but caught fails the script (exit 1), as does an unmutated
baseline that does not pass. A full run (no --only, no --kernels-only)
rewrites tests/cudasim/MUTATIONS.md with the table.

Not part of make test (it builds and runs everything once per mutation:
several minutes).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time

BUILD = os.environ.get('BUILD', 'build')
ROOT = os.path.join(BUILD, 'cudasim-mutate')
KERNEL_TESTS = ['test_bucketize_cuda', 'test_embedding_cuda', 'test_zch_cuda']
ENGINE = 'worker/engine_cuda.c'
CUB = 'tests/cudasim/include/cub/cudasim_cub.cuh'
TABLE = 'tests/cudasim/MUTATIONS.md'

# name, file, text to find (exactly once), replacement (None: a compile flag instead), what it breaks
MUTATIONS = [
    ('bag-bound-forward', 'kernels/cuda/embedding.cu',
     'for (int32_t j = b; j < e; j++) {', 'for (int32_t j = b; j <= e; j++) {',
     'forward: each bag also pools the first id of the next (off-by-one in the bag bound)'),
    ('bag-bound-backward', 'kernels/cuda/embedding.cu',
     'if (offsets[mid] <= j)', 'if (offsets[mid] < j)',
     "expand_kernel: the first id of a bag is counted in the bag before (off-by-one in the bag search)"),
    ('segment-bound', 'kernels/cuda/embedding.cu',
     'for (int32_t t = 0; t < cnt; t++) {', 'for (int32_t t = 0; t < cnt - 1; t++) {',
     "segment_kernel: a distinct row's last occurrence left out of its gradient (off-by-one)"),
    ('mean-scale', 'kernels/cuda/embedding.cu',
     'acc = __fmul_rn(acc, __fdiv_rn(1.0f, (float)(e - b)));', 'acc = __fmul_rn(acc, __fdiv_rn(1.0f, (float)(e - b + 1)));',
     'forward: mean pooling divides by the length + 1'),
    ('drop-barrier-adagrad', 'kernels/cuda/embedding.cu',
     '\t\t__syncthreads();\n\t\tf = factor;', '\t\tf = factor;',
     "apply_row: no barrier between thread 0 writing the Adagrad factor to shared memory and the others reading it"),
    ('drop-barrier-segment', 'kernels/cuda/embedding.cu',
     '\t\t\t__syncthreads();\n\t\t\tapply_row', '\t\t\tapply_row',
     "segment_kernel: no barrier between the threads' gradient columns in shared memory and the update reading them"),
    ('shared-index', 'kernels/cuda/embedding.cu',
     '\t\t\t\tg[c] = acc;', '\t\t\t\tg[threadIdx.x] = acc;',
     'segment_kernel: column c of the gradient stored at shared index threadIdx.x (wrong when dim > the block)'),
    ('skip-adagrad-state', 'kernels/cuda/embedding.cu',
     '\t\t\tstate[r] = acc;\n', '\n',
     "apply_row: the row's Adagrad accumulator is never written back"),
    ('skip-adam-moment', 'kernels/cuda/embedding.cu',
     '\t\t\tm[c] = mc;\n', '\n',
     "apply_row: Adam's first moment is never written back"),
    ('sort-bits-short', 'kernels/cuda/embedding.cu',
     '((uint64_t)nrows >> end_bit) != 0', '((uint64_t)nrows >> (end_bit + 1)) != 0',
     'group_by_row: the radix sort stops one key bit short (rows differing in the top bit interleave)'),
    ('grid-stride', 'kernels/cuda/embedding.cu',
     'for (int32_t k = blockIdx.x; k < n; k += gridDim.x) {\n\t\tint64_t r = (int64_t)uniq[k];',
     'for (int32_t k = blockIdx.x; k < n; k += gridDim.x + 1) {\n\t\tint64_t r = (int64_t)uniq[k];',
     'segment_kernel: the grid-stride loop skips a distinct row now and then'),
    ('pack-state-offset', 'kernels/cuda/embedding.cu',
     '*bs = (U *)(buf + n * wb + i * sb);', '*bs = (U *)(buf + n * wb + i * wb);',
     "rows_copy_kernel: a row's optimizer state packed at the weights' stride"),
    ('unstable-sort', CUB, '#ifdef CUDASIM_MUTATE_UNSTABLE_SORT', None,
     "simulator-side, not a kernel bug: the simulator's cub::DeviceRadixSort::SortPairs made unstable (equal keys "
     "come out reversed), to show the kernels rely on cub's sort being stable"),
    ('range-search', 'kernels/cuda/bucketize.cu',
     'if (a[mid] <= x)', 'if (a[mid] < x)',
     'bucketize: an id equal to a range start goes to the previous range (off-by-one in the binary search)'),
    ('zch-lru-tie', 'kernels/cuda/zch.cu',
     ': ls < blast);', ': ls <= blast);',
     'zch pick_victim: LRU ties go to the last slot instead of the first (not the CPU\'s choice)'),
    ('zch-fresh-flag', 'kernels/cuda/zch.cu',
     'flags[i] = fresh;', 'flags[i] = 1;',
     'zch replay_bucket: every slot flagged fresh, hits included'),
    ('engine-no-wait-gemm', ENGINE,
     '\tCUDACHECK(err, cudaMemcpyAsync(cm, dc, sizeof(float) * nc, cudaMemcpyDeviceToHost, c->stream));\n'
     '\tCUDACHECK(err, cudaStreamSynchronize(c->stream));\n',
     '\tCUDACHECK(err, cudaMemcpyAsync(cm, dc, sizeof(float) * nc, cudaMemcpyDeviceToHost, c->stream));\n',
     'engine run_gemm: returns before the product is copied back (no stream synchronize)'),
    ('engine-no-zero', ENGINE,
     'ce = cudaMemsetAsync(p, 0, len, c->stream);', 'ce = cudaSuccess;',
     'engine cuda_alloc: shard memory (weights, optimizer state) not zeroed'),
    ('engine-alloc-no-wait', ENGINE,
     '\tif (ce == cudaSuccess)\n\t\tce = cudaStreamSynchronize(c->stream);\n\tif (ce != cudaSuccess) {\n'
     '\t\trs_err_set(err, RS_ECUDA, "shard memory of',
     '\tif (ce != cudaSuccess) {\n\t\trs_err_set(err, RS_ECUDA, "shard memory of',
     "engine cuda_alloc: returns before the shard's zeroing ran (no stream synchronize), so the zeros can land "
     "after the host wrote the initial values (the lazy streams run it at the next wait)"),
    ('bucketize-no-wait', 'kernels/cuda/bucketize.cu',
     'cudaError_t ce = cudaStreamSynchronize(stream); /* also when failing: the copies write our stack */',
     'cudaError_t ce = cudaSuccess;',
     'bucketize: reads the per-owner counts and the bad flag before the copies into them ran (no stream synchronize)'),
    ('barrier-in-branch', 'kernels/cuda/embedding.cu',
     '\t\t\tfactor = __fdiv_rn(p.lr, __fadd_rn(__fsqrt_rn(acc), p.eps));\n\t\t}\n\t\t__syncthreads();\n',
     '\t\t\tfactor = __fdiv_rn(p.lr, __fadd_rn(__fsqrt_rn(acc), p.eps));\n\t\t\t__syncthreads();\n\t\t}\n',
     "apply_row: the Adagrad factor's barrier moved inside thread 0's branch (threads wait at different barriers; "
     "the results go wrong too)"),
    ('apply-skip-divergent', 'kernels/cuda/embedding.cu',
     'if (r < 0 || r >= nrows)\n\t\t\tcontinue; /* the same for the whole block */',
     'if (r < 0 || r >= nrows || (int32_t)threadIdx.x >= dim)\n\t\t\tcontinue; /* the same for the whole block */',
     "apply_kernel: threads past the row's width skip every row and leave while the others wait at the barriers "
     "(the results stay right: without the barrier check the tests pass)"),
    ('zch-host-struct', 'kernels/cuda/zch.cu',
     'z->d, ids, z->pos_out, z->uniq,',
     '[&] { zch_dev h = z->d; h.local = z->h_local; return h; }(), ids, z->pos_out, z->uniq,',
     "zch run_kernel: the struct argument's bucket map points at the host copy (h_local), not the device one "
     "(the simulated kernel reads host memory fine: without the launch's scan of struct arguments the tests pass)"),
]


def sh(cmd, log, env=None, timeout=900):
    with open(log, 'a') as f:
        f.write('$ %s\n' % ' '.join(cmd))
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write('timed out after %d s\n' % timeout)
            return 124


def first_failure(log, src):
    """The first line of a test's output that says what went wrong (paths into the planted copy src as in the tree)."""
    try:
        text = open(log, errors='replace').read().replace(src.rstrip('/') + '/', '')
    except OSError:
        return ''
    for pat in (r'^FAIL .*', r'^FAILED: .*', r'^cudasim: fatal: .*', r'^cudasim: invalid memory access.*',
                r'^cudasim: .*', r'.*ERROR.*'):
        m = re.search(pat, text, re.M)
        if m:
            return m.group(0).strip()[:320]
    return ''


def build(m, name, flags, log):
    """Build the simulated tests and worker of mutation dir m."""
    src = os.path.join(m, 'src')
    lib = os.path.join(m, 'lib')
    if not os.path.islink(lib):
        os.makedirs(m, exist_ok=True)
        os.symlink(os.path.abspath(os.path.join(BUILD, 'cudasim', 'lib')), lib)
    cus = ' '.join(sorted(glob.glob(os.path.join(src, 'kernels/cuda/*.cu'))))
    targets = [os.path.join(m, 'tests/gpu', t) for t in KERNEL_TESTS] + [os.path.join(m, 'bin/rowshift-worker')]
    # the layers' archives come from make cudasim and are never rebuilt here (-o): every mutation links the same
    # host code, even while the tree is being edited
    layers = ['-o%s/lib/librowshift_%s.a' % (BUILD, l) for l in ('coordinator', 'worker', 'kernels', 'common')]
    return sh(['make', '-s', '-j2'] + layers + ['BUILD=' + BUILD, 'CUDASIM=' + m, 'CUDASIM_CU_SRCS=' + cus,
               'CUDASIM_ENGINE_SRC=' + os.path.join(src, ENGINE), 'CUDASIM_MUTATE_CUFLAGS=' + flags] + targets, log)


def run_tests(m, seed, kernels_only, logdir, all_tests=True):
    """{test: (rc, first failure line)}: the kernel tests, then train_gpu (unless they caught it already)."""
    env = dict(os.environ, BUILD=BUILD, RS_CUDASIM_SEED=str(seed), RS_CUDASIM_LEAK_CHECK='1')
    out = {}
    for t in KERNEL_TESTS:
        log = os.path.join(logdir, t + '.log')
        open(log, 'w').close()
        rc = sh(['timeout', '-k', '10', '300', os.path.join(m, 'tests/gpu', t)], log, env)
        out[t] = (rc, first_failure(log, os.path.join(m, 'src')))
    caught = any(rc != 0 for rc, _ in out.values())
    if not kernels_only and (all_tests or not caught):
        log = os.path.join(logdir, 'train_gpu.log')
        open(log, 'w').close()
        env2 = dict(env, RS_GPU_WORKER_BIN=os.path.abspath(os.path.join(m, 'bin/rowshift-worker')),
                    RS_TRAIN_GPU_STEPS='18')
        env2.pop('RS_CUDASIM_LEAK_CHECK')
        rc = sh(['timeout', '-k', '10', '300', 'bash', 'tests/gpu/train_gpu.sh'], log, env2)
        out['train_gpu'] = (rc, first_failure(log, os.path.join(m, 'src')))
    return out


def prepare(m, mutation):
    """Copy the sources into m/src and plant the mutation; return (compile flags, original line)."""
    name, path, old, new, _ = mutation
    src = os.path.join(m, 'src')
    if os.path.exists(src):
        shutil.rmtree(src)
    os.makedirs(os.path.join(src, 'kernels/cuda'))
    os.makedirs(os.path.join(src, 'worker'))
    for f in glob.glob('kernels/cuda/*.cu'):
        shutil.copy(f, os.path.join(src, f))
    shutil.copy(ENGINE, os.path.join(src, ENGINE))
    text = open(path).read()
    n = text.count(old)
    if n != 1:
        sys.exit('mutate.py: %s: the text to mutate occurs %d times in %s (the source changed?)' % (name, n, path))
    line = text[:text.index(old)].count('\n') + 1
    if new is None:
        return '-DCUDASIM_MUTATE_UNSTABLE_SORT', line
    with open(os.path.join(src, path), 'w') as f:
        f.write(text.replace(old, new))
    return '', line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--only', help='comma-separated mutation names')
    ap.add_argument('--seed', type=int, default=1, help='RS_CUDASIM_SEED of every run (default 1, as make test)')
    ap.add_argument('--kernels-only', action='store_true', help='skip train_gpu.sh')
    ap.add_argument('--all-tests', action='store_true',
                    help='run train_gpu.sh also when a kernel test caught the bug (slow: a broken model trains slowly)')
    ap.add_argument('--list', action='store_true')
    a = ap.parse_args()
    chosen = MUTATIONS
    if a.only:
        names = a.only.split(',')
        chosen = [x for x in MUTATIONS if x[0] in names]
        if len(chosen) != len(names):
            sys.exit('mutate.py: unknown mutation in %s' % a.only)
    if a.list:
        for x in chosen:
            print('%-22s %s' % (x[0], x[4]))
        return 0
    if not os.path.exists(os.path.join(BUILD, 'cudasim/lib/libcudasim.so')):
        sys.exit('mutate.py: run make cudasim first')
    os.makedirs(ROOT, exist_ok=True)

    # the baseline: unmutated copies must build and pass
    m = os.path.join(ROOT, 'baseline')
    flags, _ = prepare(m, ('baseline', ENGINE, '#include "worker/engine_cuda.h"', '#include "worker/engine_cuda.h"', ''))
    log = os.path.join(m, 'build.log')
    open(log, 'w').close()
    t0 = time.time()
    if build(m, 'baseline', flags, log) != 0:
        sys.exit('mutate.py: the unmutated copy does not build (see %s)' % log)
    res = run_tests(m, a.seed, a.kernels_only, m)
    bad = [t for t, (rc, _) in res.items() if rc != 0]
    if bad:
        sys.exit('mutate.py: the unmutated copy fails %s (see %s)' % (', '.join(bad), m))
    print('baseline: every test passes on the unmutated copy (%.0f s)' % (time.time() - t0), flush=True)

    rows = []  # (name, where, what, result: caught / did not compile / missed, by)
    for mut in chosen:
        name, path = mut[0], mut[1]
        m = os.path.join(ROOT, name)
        flags, line = prepare(m, mut)
        log = os.path.join(m, 'build.log')
        open(log, 'w').close()
        t0 = time.time()
        if build(m, name, flags, log) != 0:
            rows.append((name, '%s:%d' % (path, line), mut[4], 'did not compile', 'see %s' % log))
            print('%-22s did not compile (see %s)' % (name, log), flush=True)
            continue
        res = run_tests(m, a.seed, a.kernels_only, m, a.all_tests)
        caught = ['%s (%s)' % (t, why or 'exit %d' % rc) for t, (rc, why) in res.items() if rc != 0]
        rows.append((name, '%s:%d' % (path, line), mut[4], 'caught' if caught else 'missed',
                     '; '.join(caught) if caught else '-'))
        print('%-22s %-8s %4.0f s  %s' % (name, 'caught' if caught else 'MISSED', time.time() - t0,
                                          ', '.join(t for t, (rc, _) in res.items() if rc != 0)), flush=True)

    table = ['| mutation | what it changes | planted at | result | caught by (first failure) |',
             '| --- | --- | --- | --- | --- |']
    for name, where, what, result, by in rows:
        table.append('| %s | %s | %s | %s | %s |' % (name, what, where, result, by.replace('|', '/')))
    count = {r: sum(1 for x in rows if x[3] == r) for r in ('caught', 'did not compile', 'missed')}
    bad = [x[0] for x in rows if x[3] != 'caught']
    summary = '%d planted: %d caught, %d did not compile, %d missed%s (RS_CUDASIM_SEED=%d)' % (
        len(rows), count['caught'], count['did not compile'], count['missed'],
        ': ' + ', '.join(bad) if bad else '', a.seed)
    print()
    print('\n'.join(table))
    print()
    print('mutate: ' + summary)
    if not a.only and not a.kernels_only:
        with open(TABLE + '.tmp', 'w') as f:
            f.write('# Mutations of the CUDA code and what catches them\n\n'
                    'Written by `python3 tests/cudasim/mutate.py` (a full run, after `make cudasim`; do not edit by\n'
                    'hand). Each row is one bug planted in a copy of the sources, built and run under the CUDA\n'
                    'simulator: the kernel tests (`tests/gpu/test_*_cuda`), then `tests/gpu/train_gpu.sh` when\n'
                    'they all passed. "did not compile" is not a catch: such a mutation must be replaced.\n'
                    'Line numbers are those of the sources when the table was written.\n\n')
            f.write('\n'.join(table) + '\n\n' + summary + '\n')
        os.replace(TABLE + '.tmp', TABLE)
        print('mutate: wrote %s' % TABLE)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
