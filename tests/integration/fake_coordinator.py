"""A listener squatting on a coordinator's port (standard library only):
it speaks enough WebSocket to open each connection with a challenge as a
coordinator would, keeps every message its clients send, and answers each
join with a refusal it cannot prove.

usage: fake_coordinator.py PORT SECONDS OUT [WORKERS REFUSALS MIN_SECONDS]
  serves PORT for SECONDS, or with WORKERS given, until each of that many
  workers (by name) has had REFUSALS joins refused, and MIN_SECONDS have
  passed; then writes to OUT one line per message received (the raw text),
  and exits."""
import base64
import hashlib
import json
import os
import select
import socket
import struct
import sys
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(text):
    data = text.encode()
    n = len(data)
    head = bytes([0x81]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n))
    return head + data


def messages(buf):
    """Complete masked client frames in buf: (texts, rest)."""
    out = []
    while len(buf) >= 2:
        n, off = buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, off = struct.unpack(">H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, off = struct.unpack(">Q", buf[2:10])[0], 10
        if len(buf) < off + 4 + n:
            break
        mask, body = buf[off:off + 4], buf[off + 4:off + 4 + n]
        if buf[0] & 0x0F == 1:  # text; a PING (the worker's idle check after 30 s) is no message
            out.append(bytes(b ^ mask[i % 4] for i, b in enumerate(body)).decode(errors="replace"))
        buf = buf[off + 4 + n:]
    return out, buf


def serve(conn, got):
    conn.settimeout(3)
    req = b""
    while b"\r\n\r\n" not in req:
        chunk = conn.recv(4096)
        if not chunk:
            return
        req += chunk
    key = b""
    for line in req.split(b"\r\n"):
        if line.lower().startswith(b"sec-websocket-key:"):
            key = line.split(b":", 1)[1].strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
    conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: rowshift-control\r\n\r\n").encode())
    conn.sendall(frame(json.dumps({"type": "challenge", "nonce": os.urandom(16).hex(), "epoch": os.urandom(16).hex()})))
    buf = req.split(b"\r\n\r\n", 1)[1]
    end = time.time() + 3
    while time.time() < end:
        texts, buf = messages(buf)
        for t in texts:
            got.append(t)
            if '"join"' in t:
                conn.sendall(frame(json.dumps({"type": "refused", "reason": "bad join token"})))
                try:
                    return json.loads(t).get("worker")
                except ValueError:
                    return None
        r, _, _ = select.select([conn], [], [], 0.2)
        if r:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk


def main():
    port, seconds, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    workers, refusals, least = (int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 \
        else (None, 0, 0)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    got, refused = [], {}
    start = time.time()
    while time.time() < start + seconds:
        if workers and time.time() >= start + least and len(refused) >= workers and \
                min(refused.values()) >= refusals:
            break
        r, _, _ = select.select([ls], [], [], 0.2)
        if r:
            conn, _ = ls.accept()
            try:
                name = serve(conn, got)
                if name:
                    refused[name] = refused.get(name, 0) + 1
            except OSError:
                pass
            conn.close()
    ls.close()
    with open(out, "w") as f:
        for t in got:
            f.write(t + "\n")


main()
