"""A raw WebSocket client (standard library only) that sends the control
channel what a broken or hostile peer might, and prints what comes back.

usage: ws_probe.py PORT CASE
  malformed   invalid JSON, then a join with a bad token
  early       a progress message before any join
  oversized   one message over the 16 MiB limit, then invalid JSON
Prints one line per message received, then "closed" or "open"."""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wslib  # noqa: E402

send = wslib.send


def connect(port):
    c = wslib.connect(port, "rowshift-control")
    if c is None:
        raise SystemExit("handshake refused")
    return c


def recv(r):
    m = r.next(10)
    if m is None and not r.closed:
        raise socket.timeout()
    return m.decode(errors="replace") if m is not None else None


def main():
    port, case = int(sys.argv[1]), sys.argv[2]
    s, rest = connect(port)
    r = wslib.Reader(s, rest)
    if case == "malformed":
        send(s, b"{this is not json")
        print(recv(r))
        send(s, b'{"type":"join","token":"wrong","worker":"prober","addr":"127.0.0.1:1","pid":1}')
        print(recv(r))
    elif case == "early":
        send(s, b'{"type":"progress","rank":0,"step":1,"loss":0.5,"samples_per_s":1}')
        print(recv(r))
    elif case == "oversized":
        send(s, b'{"type":"x","pad":"' + b"a" * (17 << 20) + b'"}')
        print(recv(r))
        send(s, b"[1,2")
        print(recv(r))
    m = r.next(3)
    print("closed" if m is None and r.closed else "open")


main()
