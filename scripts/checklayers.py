#!/usr/bin/env python3
"""checklayers.py - the include rules of rowshift's layers, checked.

    common  <-  kernels  <-  worker
    common  <-  coordinator
    common  <-  ctl

A file may include project headers of its own layer and of the layers it
stands on, nothing else (kernels/cuda/ is part of kernels). An include is
resolved the way the compiler (with -I. at the root) resolves it: a quoted
one beside the including file first, then from the root; an angle-bracket
one from the root when the tree has it (else it is a system header). So
"../worker/x.h", <worker/x.h> and "common/../worker/x.h" all name worker/x.h,
and one that leaves the tree is refused. Inside a layer
the modules must not include each other in a cycle: a module is a file's
name without its extension; NAME_internal.h belongs where NAME does, and
A_B.c or A_B.h belongs to A when A.h exists beside it (a backend or a part
of A: engine_cpu.c, transport_tcp.c, job_cycle.c; so transport_tcp_io.c and
transport_tcp_internal.h are transport's too).

Usage: checklayers.py [ROOT]   (default: the repository this script is in)
Prints each violation as FILE:LINE: what, and exits 1 when there is any.
"""
import os
import re
import sys

LAYERS = {
    "common": {"common"},
    "kernels": {"common", "kernels"},
    "worker": {"common", "kernels", "worker"},
    "coordinator": {"common", "coordinator"},
    "ctl": {"common", "ctl"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
SOURCES = (".c", ".h", ".cu")


def layer_of(path):
    return path.split("/", 1)[0]


def module_of(path, existing):
    d, name = os.path.split(path)
    base = os.path.splitext(name)[0]
    if base.endswith("_internal"):
        base = base[: -len("_internal")]  # then as NAME is
    parts = base.split("_")
    for k in range(1, len(parts)):
        prefix = "_".join(parts[:k])
        if os.path.join(d, prefix + ".h") in existing:
            return os.path.join(d, prefix)
    return os.path.join(d, base)


def resolve(f, quote, inc, root):
    """The root-relative path the include names, None for a system header, "" outside the tree."""
    if quote == '"':
        beside = os.path.normpath(os.path.join(os.path.dirname(f), inc))
        if os.path.exists(os.path.join(root, beside)):
            return beside if not beside.startswith("..") else ""
    path = os.path.normpath(inc)
    if os.path.isabs(path) or path.startswith(".."):
        return ""
    if quote == "<" and not os.path.exists(os.path.join(root, path)):
        return None
    return path


def find_cycle(graph):
    """A cycle in graph (module -> set of modules) as a list, or None."""
    state = {}
    stack = []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                c = visit(v)
                if c:
                    return c
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state:
            c = visit(u)
            if c:
                return c
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = []
    for layer in LAYERS:
        for d, _, names in os.walk(os.path.join(root, layer)):
            files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(SOURCES)]
    existing = set(files)
    problems = []
    graph = {}
    for f in sorted(files):
        layer = layer_of(f)
        mod = module_of(f, existing)
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = resolve(f, m.group(1), m.group(2), root)
                if inc is None:
                    continue  # a system header
                if not inc:
                    problems.append(f"{f}:{n}: includes {m.group(2)}: outside the tree")
                    continue
                target = layer_of(inc)
                if target not in LAYERS:
                    if target == "tests":
                        problems.append(f"{f}:{n}: includes {inc}: the product must not include test code")
                    continue
                if target not in LAYERS[layer]:
                    named = m.group(2) if m.group(2) == inc else f"{m.group(2)} ({inc})"
                    problems.append(f"{f}:{n}: includes {named}: {layer}/ may include only "
                                    f"{', '.join(sorted(LAYERS[layer]))}")
                    continue
                if target == layer:
                    other = module_of(inc, existing)
                    if other != mod:
                        graph.setdefault(mod, set()).add(other)
    cycle = find_cycle(graph)
    if cycle:
        problems.append(f"{cycle[0]}: modules include each other in a cycle: {' -> '.join(cycle)}")
    for p in problems:
        print(p)
    print(f"checklayers: {len(files)} files, {sum(len(v) for v in graph.values())} module edges, "
          f"{len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
