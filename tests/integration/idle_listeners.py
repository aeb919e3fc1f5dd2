"""Idle connections to every transport listener of a job's workers
(standard library only): while it runs, watches the listening TCP sockets
of the given processes' descendants (/proc/PID/fd and /proc/net/tcp{,6})
and opens connections to each new one, which then never say a word.

Without --per: one connection to each listener, held until the end.
With --per N: a flood, N connections kept open to each listener (more than
it keeps in their handshake), a new one opened for each the worker closes.

It stops after SECONDS, or once none of the PIDs is running.

usage: idle_listeners.py [--per N] SECONDS PID...
Prints one JSON line: {"connected": N, "ports": [...], "closed_by_worker": N,
"peak": {port: most connections established to it at once}}"""
import json
import os
import resource
import select
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


def running(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Flood:
    """per connections kept open to each port; counts what the workers close."""

    def __init__(self, per):
        self.per, self.poll = per, select.poll()
        self.socks = {}  # fd -> (port, socket, established)
        self.open = {}  # port -> connections not closed yet
        self.up = {}  # port -> of those, established
        self.peak, self.connected, self.closed = {}, 0, 0
        self.gone = set()  # ports that refused a connection: the listener is closed

    def fill(self, port):
        while port not in self.gone and self.open.get(port, 0) < self.per:
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                self.gone.add(port)
                return
            self.socks[s.fileno()] = (port, s, False)
            self.poll.register(s.fileno(), select.POLLOUT)
            self.open[port] = self.open.get(port, 0) + 1

    def drop(self, fd):
        port, s, up = self.socks.pop(fd)
        self.poll.unregister(fd)
        s.close()
        self.open[port] -= 1
        self.up[port] = self.up.get(port, 0) - up
        return port

    def step(self, ms):
        for fd, ev in self.poll.poll(ms):
            port, s, up = self.socks[fd]
            if not up:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self.gone.add(self.drop(fd))  # refused: the listener is gone
                    continue
                self.socks[fd] = (port, s, True)
                self.poll.modify(fd, select.POLLIN)
                self.up[port] = self.up.get(port, 0) + 1
                self.peak[port] = max(self.peak.get(port, 0), self.up[port])
                self.connected += 1
                continue
            try:
                if s.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except OSError:
                pass
            self.closed += 1
            self.fill(self.drop(fd))


def main():
    args = sys.argv[1:]
    per = 0
    if args[0] == "--per":
        per, args = int(args[1]), args[2:]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = per * 8 + 64
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    seconds, roots = float(args[0]), [int(p) for p in args[1:]]
    held, seen = [], set()
    flood = Flood(per) if per else None
    end = time.time() + seconds
    while time.time() < end and any(running(r) for r in roots):
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
                    if flood:
                        flood.fill(port)
                        continue
                    try:
                        held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                    except OSError:
                        pass
        if flood:
            flood.step(5)
        else:
            time.sleep(0.005)
    out = {"connected": flood.connected if flood else len(held), "ports": sorted(p for _, p in seen)}
    if flood:
        out["closed_by_worker"], out["peak"] = flood.closed, flood.peak
    print(json.dumps(out))


main()
