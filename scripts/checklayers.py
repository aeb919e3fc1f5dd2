#!/usr/bin/env python3
"""checklayers.py - the include rules of rowshift's layers, checked.

    common  <-  kernels  <-  worker
    common  <-  coordinator
    common  <-  ctl

A file may include project headers of its own layer and of the layers it
stands on, nothing else (kernels/cuda/ is part of kernels). Inside a layer
the modules must not include each other in a cycle: a module is a file's
name without its extension; NAME_internal.h belongs to NAME, and A_B.c or
A_B.h belongs to A when A.h exists beside it (a backend or a part of A:
engine_cpu.c, transport_tcp.c, job_cycle.c).

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
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".c", ".h", ".cu")


def layer_of(path):
    return path.split("/", 1)[0]


def module_of(path, existing):
    d, name = os.path.split(path)
    base = os.path.splitext(name)[0]
    if base.endswith("_internal"):
        return os.path.join(d, base[: -len("_internal")])
    parts = base.split("_")
    for k in range(1, len(parts)):
        prefix = "_".join(parts[:k])
        if os.path.join(d, prefix + ".h") in existing:
            return os.path.join(d, prefix)
    return os.path.join(d, base)


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
                inc = m.group(1)
                if "/" not in inc:
                    continue  # a sibling in the same folder (kernels/cuda's private headers)
                target = layer_of(inc)
                if target not in LAYERS:
                    if target == "tests":
                        problems.append(f"{f}:{n}: includes {inc}: the product must not include test code")
                    continue
                if target not in LAYERS[layer]:
                    problems.append(f"{f}:{n}: includes {inc}: {layer}/ may include only "
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
