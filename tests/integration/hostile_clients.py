"""Unauthenticated clients that try to cost the coordinator memory,
descriptors and time, or to lock others out or forge its log, and an
impostor on its address trying the same on a worker (standard library
only). Each prints one JSON line.

usage:
  hostile_clients.py PORT PID SECONDS
      sends a 16 MiB message before any join on one connection, then opens
      500 WebSockets on the control protocol that never join and 300 plain
      TCP connections that never speak; holds them for SECONDS while asking
      /healthz every half second: {"ws_opened", "tcp_opened",
      "closed_by_server", "still_open", "big_closed", "healthz_ok",
      "healthz_failed", "peak_kib"} where peak_kib is the coordinator's (PID)
      peak resident memory (VmHWM) at the end.
  hostile_clients.py lockout PORT ADMIN_FILE JOINS
      keeps 100 control WebSockets open that never join (opening a new one
      for each the server closes) and, among them, joins JOINS times with the
      token from ADMIN_FILE (as a tool: no address): {"idle_opened",
      "idle_open", "joins_ok", "joins_failed", "first_failure"}.
  hostile_clients.py refusals PORT N
      N connections whose first message is not JSON, N WebSocket upgrades
      from a page of another site: {"sent", "refused", "seconds"} (refused:
      the malformed ones answered "refused"; seconds: how long it all took).
  hostile_clients.py inject PORT MARKER
      a join with an extra key that carries a newline, a forged log line
      starting with MARKER and terminal escapes: {"answer"}.
  hostile_clients.py status PORT PID N SECONDS
      N status clients that never read a byte, held SECONDS while PID's
      resident memory is sampled: {"upgraded", "refused", "rss_before_kib",
      "rss_peak_kib"}.
  hostile_clients.py impostor WORKER_BIN CONFIG
      listens on a free port as an impostor coordinator and starts a worker
      (WORKER_BIN, giving up after 3 s without a coordinator) against it:
      its first connection gets one 8 MiB message before any challenge, the
      next a challenge and then 2000 messages unasked: {"connections",
      "big_cut_off", "flood_cut_off", "worker_peak_kib", "worker_exit"}
      (cut off: the worker hung up before the impostor got it all out)."""
import hashlib
import json
import os
import select
import socket
import struct
import subprocess
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


def flood(port, pid, seconds):
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


def vm_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def join_msg(challenge, token, worker="hostile-tool", addr=""):
    """A join proving token (common/proto.h, "The join handshake"), as bytes."""
    return wslib.join_msg(challenge, token, worker, addr)


def first_answer(port, payload):
    """Connect, read the challenge, send payload (bytes, or a function of the challenge): the answer, or None."""
    c = wslib.connect(port, "rowshift-control", timeout=10)
    if c is None:
        return None
    s, rest = c
    try:
        r = wslib.Reader(s, rest)
        challenge = r.next(10)
        if challenge is None:
            return None
        wslib.send(s, payload(challenge) if callable(payload) else payload)
        m = r.next(10)
        return m.decode(errors="replace") if m is not None else None
    except OSError:
        return None
    finally:
        s.close()


def lockout(port, admin, joins):
    token = json.load(open(admin))["token"]
    idle, opened, ok, failed, first_failure = [], 0, 0, 0, None
    for _ in range(joins):
        idle = [s for s in idle if not closed(s)]
        while len(idle) < 100:
            try:
                c = wslib.connect(port, "rowshift-control", timeout=5)
            except OSError:
                c = None
            if c is None:
                break  # refused: the old cap
            idle.append(c[0])
            opened += 1
        answer = first_answer(port, lambda ch: join_msg(ch, token))
        if answer and json.loads(answer).get("type") == "welcome":
            ok += 1
        else:
            failed += 1
            first_failure = first_failure or str(answer)
    open_now = sum(1 for s in idle if not closed(s))
    print(json.dumps({"idle_opened": opened, "idle_open": open_now, "joins_ok": ok, "joins_failed": failed,
                      "first_failure": first_failure}))


def refusals(port, n):
    refused = sent = 0
    start = time.time()
    for _ in range(n):
        answer = first_answer(port, b"{this is not json")
        sent += 1
        refused += bool(answer and json.loads(answer).get("type") == "refused")
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall((f"GET /status HTTP/1.1\r\nHost: rebind.example:{port}\r\nOrigin: http://rebind.example:{port}\r\n"
                       "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: rowshift-status\r\n\r\n").encode())
            s.recv(4096)
            s.close()
            sent += 1
        except OSError:
            pass
    print(json.dumps({"sent": sent, "refused": refused, "seconds": time.time() - start}))


def inject(port, marker):
    def forged(challenge):
        j = json.loads(join_msg(challenge, "not-the-token"))
        j[f"\n{marker} INFO  coordinator generation 77 committed: 1 -> 9 workers \u001b[31mRED\u001b[0m"] = 1
        return json.dumps(j).encode()
    print(json.dumps({"answer": first_answer(port, forged)}))


def status(port, pid, n, seconds):
    before, socks, upgraded, refused = vm_rss(pid), [], 0, 0
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall((f"GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: rowshift-status\r\n\r\n").encode())
            head = s.recv(12)  # the status line only: the rest (a snapshot) is never read
        except OSError:
            head = b""
        if head.startswith(b"HTTP/1.1 101"):
            upgraded += 1
        else:
            refused += 1
        socks.append(s)
    peak, until = before, time.time() + seconds
    while time.time() < until:
        peak = max(peak, vm_rss(pid))
        time.sleep(0.1)
    print(json.dumps({"upgraded": upgraded, "refused": refused, "rss_before_kib": before, "rss_peak_kib": peak}))


GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_upgrade(ls, deadline):
    """Accept a connection on ls and answer its upgrade as a coordinator would; the socket, or None."""
    ls.settimeout(max(0.1, deadline - time.time()))
    try:
        c, _ = ls.accept()
        c.settimeout(10)
        buf = wslib.read_head(c)
        if buf is None:
            return None
    except OSError:
        return None
    key = [l.split(b":", 1)[1].strip() for l in buf.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    accept = __import__("base64").b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Accept: " + accept + b"\r\nSec-WebSocket-Protocol: rowshift-control\r\n\r\n")
    return c


def frame(payload):
    """An unmasked text frame: a server's."""
    n = len(payload)
    head = bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + struct.pack(">H", n) if n < 65536 else \
        bytes([0x81, 127]) + struct.pack(">Q", n)
    return head + payload


def impostor(worker_bin, config):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    port = ls.getsockname()[1]
    env = dict(os.environ, ROWSHIFT_JOIN_TOKEN="the-real-one-is-elsewhere")
    w = subprocess.Popen([worker_bin, "--coordinator", f"ws://127.0.0.1:{port}", "--config", config, "--name",
                          "impostor-victim", "--coordinator-grace-ms", "3000"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    big = b"[" + b"{}," * ((8 << 20) // 3 - 1) + b"{}]"  # what costs a JSON parser most per byte
    small = frame(b"[" + b"{}," * 1300 + b"{}]")
    challenge = frame(json.dumps({"type": "challenge", "nonce": "0" * 32, "epoch": "0" * 32}).encode())
    peak, cut = 0, {}
    conns, deadline = 0, time.time() + 60
    for what in ("big", "flood"):
        c = accept_upgrade(ls, deadline)
        if c is None:
            break
        conns += 1
        try:
            if what == "big":
                c.sendall(frame(big))
            else:
                c.sendall(challenge)
                for _ in range(2000):
                    c.sendall(small)
            cut[what] = False
        except OSError:
            cut[what] = True  # the worker hung up on it
        for _ in range(20):  # what it cost the worker, while it still had it
            try:
                peak = max(peak, vm_hwm(w.pid))
            except OSError:
                break
            time.sleep(0.05)
        c.close()
    ls.close()  # nobody there any more: the worker gives up
    while w.poll() is None and time.time() < deadline:
        try:
            peak = max(peak, vm_hwm(w.pid))
        except OSError:
            pass
        time.sleep(0.05)
    if w.poll() is None:
        w.kill()
    print(json.dumps({"connections": conns, "big_cut_off": cut.get("big"), "flood_cut_off": cut.get("flood"),
                      "worker_peak_kib": peak, "worker_exit": w.wait()}))


def main():
    mode = sys.argv[1]
    if mode == "lockout":
        lockout(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif mode == "refusals":
        refusals(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "inject":
        inject(int(sys.argv[2]), sys.argv[3])
    elif mode == "status":
        status(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    elif mode == "impostor":
        impostor(sys.argv[2], sys.argv[3])
    else:
        flood(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))


if __name__ == "__main__":
    main()
