#!/usr/bin/env python3
"""cu2cc.py - turn a .cu file into C++ the CUDA simulator compiles (tests/cudasim).

    cu2cc.py SRC.cu OUT.cc

The source is never modified; OUT keeps SRC's line numbers (a #line directive
names SRC, so diagnostics and __FILE__ point at the .cu). Three rewrites, made
outside comments and string literals:

  k<<<grid, block[, shmem[, stream]]>>>(args)
      -> ::cudasim::launch({__FILE__, __LINE__, "k"}, k, grid, block[, ...])(args)
      (k may carry template arguments: forward_kernel<RS_DTYPE_FP16>)
  __shared__ T name[dims];      (in a function)
      -> static ::cudasim::shared_slot cudasim_shared_name;
         T (&name)[dims] = ::cudasim::shared_get<T[dims]>(cudasim_shared_name);
      storage of the running block, garbage when the block starts
  extern __shared__ T name[];
      -> T *const name = (T *)::cudasim::dynamic_shared();

Anything it cannot rewrite (a launch it cannot parse, a __shared__ variable at
namespace scope) stops it with file:line and exit status 1.
"""
import re
import sys


def mask(text):
    """text with comments, string and character literals blanked (same length, newlines kept)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != '\n':
                out[k] = ' '
        i = j
    return ''.join(out)


def fail(path, text, pos, why):
    sys.stderr.write('%s:%d: cu2cc: %s\n' % (path, text.count('\n', 0, pos) + 1, why))
    sys.exit(1)


def kernel_start(m, end, path):
    """Start of the kernel expression that ends just before `end` (identifier, maybe template arguments)."""
    i = end
    while i > 0 and m[i - 1].isspace():
        i -= 1
    if i > 0 and m[i - 1] == '>':  # template arguments: back to the matching '<'
        depth = 0
        while i > 0:
            i -= 1
            if m[i] == '>':
                depth += 1
            elif m[i] == '<':
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            fail(path, m, end, 'unbalanced template arguments before <<<')
        while i > 0 and m[i - 1].isspace():
            i -= 1
    j = i
    while j > 0 and (m[j - 1].isalnum() or m[j - 1] in '_:'):
        j -= 1
    if j == i:
        fail(path, m, end, 'no kernel name before <<<')
    return j


def config_end(m, start, path):
    """Index of the '>>>' closing the launch configuration that starts at `start`."""
    depth, i = 0, start
    while i < len(m):
        c = m[i]
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif depth == 0 and m.startswith('>>>', i):
            return i
        i += 1
    fail(path, m, start, 'no >>> closing the launch configuration')


def rewrite(path, text):
    edits = []  # (start, end, replacement)
    m = mask(text)
    for hit in re.finditer(r'<<<', m):
        if any(s <= hit.start() < e for s, e, _ in edits):
            continue
        k0 = kernel_start(m, hit.start(), path)
        c1 = config_end(m, hit.end(), path)
        name = re.sub(r'\s+', ' ', text[k0:hit.start()].strip())
        edits.append((k0, k0, '::cudasim::launch({__FILE__, __LINE__, "%s"}, ' % name))
        edits.append((hit.start(), hit.end(), ', '))
        edits.append((c1, c1 + 3, ')'))
    depth_at = []  # brace depth before each position, for the scope of __shared__ declarations
    depth = 0
    for c in m:
        depth_at.append(depth)
        depth += c == '{'
        depth -= c == '}'
    for hit in re.finditer(r'\bextern\s+__shared__\s+([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;', m):
        t, name = text[hit.start(1):hit.end(1)].strip(), hit.group(2)
        t = re.sub(r'__align__\s*\(\s*\d+\s*\)', '', t).strip()
        edits.append((hit.start(), hit.end(), '%s *const %s = (%s *)::cudasim::dynamic_shared();' % (t, name, t)))
    for hit in re.finditer(r'(?<!extern )\b__shared__\s+([^;=\[\]]*?)\s*\b(\w+)\s*((?:\[[^\]]*\]\s*)*);', m):
        if re.search(r'\bextern\s+$', m[max(0, hit.start() - 20):hit.start()]):
            continue
        if depth_at[hit.start()] == 0:
            fail(path, m, hit.start(), '__shared__ at namespace scope is not simulated')
        t, name = text[hit.start(1):hit.end(1)].strip(), hit.group(2)
        dims = re.sub(r'\s+', '', text[hit.start(3):hit.end(3)])
        slot = 'cudasim_shared_' + name
        ref = '(&%s)%s' % (name, dims) if dims else '&' + name
        edits.append((hit.start(), hit.end(),
                      'static ::cudasim::shared_slot %s; %s %s = ::cudasim::shared_get<%s%s>(%s);'
                      % (slot, t, ref, t, dims, slot)))
    edits.sort(key=lambda e: (e[0], e[1]))
    out, at = [], 0
    for s, e, r in edits:
        if s < at:
            fail(path, m, s, 'overlapping rewrites')
        out.append(text[at:s])
        out.append(r)
        at = e
    out.append(text[at:])
    return ''.join(out)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write('usage: cu2cc.py SRC.cu OUT.cc\n')
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    body = rewrite(src, text)
    with open(dst + '.tmp', 'w') as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(body)
    import os
    os.replace(dst + '.tmp', dst)
    return 0


if __name__ == '__main__':
    sys.exit(main())
