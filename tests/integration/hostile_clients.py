"""Unauthenticated clients that try to cost the coordinator memory,
descriptors and time (standard library only), while /healthz is probed.

usage: hostile_clients.py PORT PID SECONDS
  sends a 16 MiB message before any join on one connection, then opens
  500 WebSockets on the control protocol that never join and 300 plain TCP
  connections that never speak; holds them for SECONDS while asking /healthz
  every half second; then prints one JSON line:
  {"ws_opened", "tcp_opened", "closed_by_server", "still_open", "big_closed",
   "healthz_ok", "healthz_failed", "peak_kib"} where peak_kib is the
  coordinator's (PID) peak resident memory (VmHWM) at the end."""
import json
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wslib  # noqa: E402


def healthz(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        return data.startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def closed(s):
    """The server closed s (EOF or reset), after whatever it sent first (a challenge)."""
    try:
        s.setblocking(False)
        while True:
            if s.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def main():
    port, pid, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    held = []
    ws = tcp = 0
    big = wslib.connect(port, "rowshift-control", timeout=5)
    big_closed = False
    if big:
        big = big[0]
        try:
            big.settimeout(10)
            wslib.send(big, b'{"type":"x","pad":"' + b"a" * (16 << 20) + b'"}')
        except OSError:
            big_closed = True  # cut off mid-message: what a refusal looks like
    for _ in range(500):
        try:
            c = wslib.connect(port, "rowshift-control", timeout=5)
        except OSError:
            c = None
        if c:
            held.append(c[0])
            ws += 1
    for _ in range(300):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            tcp += 1
        except OSError:
            pass
    ok = bad = 0
    until = time.time() + seconds
    while time.time() < until:
        if healthz(port):
            ok += 1
        else:
            bad += 1
        time.sleep(0.5)
    gone = sum(1 for s in held if closed(s))
    if big and not big_closed:
        big_closed = closed(big)
    print(json.dumps({"ws_opened": ws, "tcp_opened": tcp, "closed_by_server": gone, "still_open": len(held) - gone,
                      "big_closed": big_closed, "healthz_ok": ok, "healthz_failed": bad, "peak_kib": vm_hwm(pid)}))


main()
