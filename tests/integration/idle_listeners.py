"""Idle connections to every transport listener of a job's workers
(standard library only): while it runs, watches the listening TCP sockets
of the given processes (/proc/PID/fd and /proc/net/tcp{,6}) and opens one
connection to each new one, which then never says a word; they are held
until the end.

usage: idle_listeners.py SECONDS PID...   (the processes whose descendants to watch)
Prints one JSON line: {"connected": N, "ports": [...]}"""
import json
import os
import socket
import sys
import time


def inodes(pid):
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def listening():
    """inode -> port of every listening TCP socket on the machine."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A":  # LISTEN
                out[f[9]] = int(f[1].split(":")[1], 16)
    return out


def children(pid):
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def main():
    seconds, roots = float(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    held, seen = [], set()
    end = time.time() + seconds
    while time.time() < end:
        pids, todo = [], [c for r in roots for c in children(r)]
        while todo:  # every descendant: the workers (whatever wraps the coordinator)
            pid = todo.pop()
            pids.append(pid)
            todo += children(pid)
        lis = listening()
        for pid in pids:
            for ino in inodes(pid):
                port = lis.get(ino)
                if port and (pid, port) not in seen:
                    seen.add((pid, port))
                    try:
                        held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                    except OSError:
                        pass
        time.sleep(0.005)
    print(json.dumps({"connected": len(held), "ports": sorted(p for _, p in seen)}))


main()
