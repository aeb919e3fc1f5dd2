"""A raw WebSocket client (standard library only) that sends the control
channel what a broken or hostile peer might, and prints what comes back.

usage: ws_probe.py PORT CASE
  malformed   invalid JSON, then a join with a bad token
  early       a progress message before any join
  oversized   one message over the 16 MiB limit, then invalid JSON
Prints one line per message received, then "closed" or "open"."""
import base64
import os
import socket
import struct
import sys


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Protocol: rowshift-control\r\n\r\n").encode())
    resp = b""
    while b"\r\n\r\n" not in resp:
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit("handshake refused")
        resp += chunk
    assert resp.startswith(b"HTTP/1.1 101"), resp
    return s


def send(s, payload, opcode=1):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if n < 1 << 20 else \
        (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
    s.sendall(head + mask + body)


def recv(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                return None
            b += c
        return b
    h = exact(2)
    if h is None:
        return None
    op, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = struct.unpack(">H", exact(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", exact(8))[0]
    data = exact(n) if n else b""
    if op == 8:
        return None
    return data.decode(errors="replace")


def main():
    port, case = int(sys.argv[1]), sys.argv[2]
    s = connect(port)
    if case == "malformed":
        send(s, b"{this is not json")
        print(recv(s))
        send(s, b'{"type":"join","token":"wrong","worker":"prober","addr":"127.0.0.1:1","pid":1}')
        print(recv(s))
    elif case == "early":
        send(s, b'{"type":"progress","rank":0,"step":1,"loss":0.5,"samples_per_s":1}')
        print(recv(s))
    elif case == "oversized":
        send(s, b'{"type":"x","pad":"' + b"a" * (17 << 20) + b'"}')
        print(recv(s))
        send(s, b"[1,2")
        print(recv(s))
    s.settimeout(3)
    try:
        print("closed" if recv(s) is None else "open")
    except socket.timeout:
        print("open")


main()
