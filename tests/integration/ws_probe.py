"""A raw WebSocket client (standard library only) that sends the control
channel what a broken or hostile peer might, and prints what comes back.

usage: ws_probe.py PORT CASE
  malformed   invalid JSON as the first message
  badtoken    a join proving a wrong token
  early       a progress message before any join
  oversized   one message over 4 KiB before any join (the coordinator's limit until a join)
  joined      a proper join (the token from ROWSHIFT_JOIN_TOKEN, the model config's digest
              from ROWSHIFT_MODEL), then one message over the 16 MiB limit, then invalid JSON
  nomodel     a worker's join (it names a transport address) proving the token without
              the model config's digest
  rebind      what a page of another site gets when DNS rebinding points its name
              at the coordinator, and what a page under localhost gets (a port-forward):
              one line "WHAT HOST: STATUS" per request (101: upgraded; none: closed unanswered)
The coordinator's challenge, which opens every connection, is read first and
not printed. Prints one line per message received, then "closed" or "open"."""
import json
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


def join(challenge, token, worker="prober", protocol=wslib.PROTOCOL, model=""):
    """A worker's join proving `token` (common/proto.h, "The join handshake"), as bytes."""
    return wslib.join_msg(challenge, token, worker, "127.0.0.1:1", protocol, model)


def http_status(port, path, host, origin=None, protocol=None):
    """The status line's code of a request for path with these headers (an upgrade when protocol is given)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
    if origin:
        head += f"Origin: {origin}\r\n"
    if protocol:
        head += ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n")
    else:
        head += "Connection: close\r\n"
    try:
        s.sendall((head + "\r\n").encode())
        line = s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError:
        line = ""
    s.close()
    return line.split(" ")[1] if line.startswith("HTTP/1.1 ") else "none"


def rebind(port):
    for name in ("rebind.example", "localhost"):
        host = f"{name}:{port}"
        print(f"status {name}:", http_status(port, "/status", host, f"http://{host}", "rowshift-status"))
        print(f"control {name}:", http_status(port, "/", host, f"http://{host}", "rowshift-control"))
        print(f"page {name}:", http_status(port, "/", host))


def main():
    port, case = int(sys.argv[1]), sys.argv[2]
    if case == "rebind":
        rebind(port)
        return
    s, rest = connect(port)
    r = wslib.Reader(s, rest)
    challenge = recv(r)
    if case == "malformed":
        send(s, b"{this is not json")
        print(recv(r))
    elif case == "badtoken":
        send(s, join(challenge, "not-the-token"))
        print(recv(r))
    elif case == "early":
        send(s, b'{"type":"progress","rank":0,"step":1,"loss":0.5,"samples_per_s":1}')
        print(recv(r))
    elif case == "oversized":
        try:
            send(s, b'{"type":"x","pad":"' + b"a" * (1 << 20) + b'"}')
        except OSError:
            pass  # closed on us mid-way: what we expect
        print(recv(r))
    elif case in ("newer", "unversioned", "nomodel"):  # the token proven; another protocol version, or no digest
        token = os.environ["ROWSHIFT_JOIN_TOKEN"]
        j = join(challenge, token, protocol={"newer": wslib.PROTOCOL + 1, "unversioned": None}.get(case, wslib.PROTOCOL))
        send(s, j)
        answer = recv(r)
        print(answer)
        a = json.loads(answer)
        print("signed" if a.get("proof") == wslib.answer_proof(challenge, token, j, a.get("reason", "")) else "unsigned")
    elif case == "joined":
        send(s, join(challenge, os.environ["ROWSHIFT_JOIN_TOKEN"], model=os.environ["ROWSHIFT_MODEL"]))
        print(recv(r))
        send(s, b'{"type":"x","pad":"' + b"a" * (17 << 20) + b'"}')
        print(recv(r))
        send(s, b"[1,2")
        print(recv(r))
    m = r.next(3)
    print("closed" if m is None and r.closed else "open")


main()
