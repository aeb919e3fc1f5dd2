"""A minimal WebSocket client over the standard library, for the tests:
the handshake with a subprotocol, masked frames out, frames parsed in."""
import base64
import collections
import hashlib
import hmac
import json
import os
import select
import socket
import struct
import time


def read_head(s):
    """An HTTP head (through its blank line, and whatever came after it), or None when the peer closed first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            return None
        buf += chunk
    return buf


def connect(port, protocol, path="/", token=None, timeout=10):
    """(socket, bytes already read past the handshake), or None when refused."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{auth}"
               f"Sec-WebSocket-Protocol: {protocol}\r\n\r\n").encode())
    resp = read_head(s)
    if resp is None or not resp.startswith(b"HTTP/1.1 101"):
        return None
    return s, resp.split(b"\r\n\r\n", 1)[1]


def send(s, payload, opcode=1):
    """One masked frame (text by default)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    if n < 1 << 20:
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    else:
        body = (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
    s.sendall(head + mask + body)


class Reader:
    """Incremental frame parser over a socket's bytes."""

    def __init__(self, s, buf=b""):
        self.s, self.buf, self.closed, self.ready = s, buf, False, collections.deque()

    def frames(self):
        """Every whole message in the buffer, in order."""
        out = []
        while len(self.buf) >= 2:
            op, n, off = self.buf[0] & 0x0F, self.buf[1] & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    break
                n, off = struct.unpack(">H", self.buf[2:4])[0], 4
            elif n == 127:
                if len(self.buf) < 10:
                    break
                n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
            if len(self.buf) < off + n:
                break
            data, self.buf = self.buf[off:off + n], self.buf[off + n:]
            if op == 8:
                self.closed = True
                break
            if op == 9:  # a PING (the coordinator's idle check, 30 s after the last PONG): answered, as a browser does
                try:
                    send(self.s, data, opcode=10)
                except BlockingIOError:
                    pass  # its socket full: without the PONG, the coordinator hangs up 600 s after its last one
                except OSError:
                    self.closed = True
            if op in (1, 2):
                out.append(data)
        return out

    def pump(self):
        """Read what the socket has; the messages it completes."""
        try:
            chunk = self.s.recv(1 << 16)
        except (BlockingIOError, socket.timeout):
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return []
        self.buf += chunk
        return self.frames()

    def next(self, timeout):
        """The next message within timeout seconds, or None."""
        self.ready.extend(self.frames())
        end = time.time() + timeout
        while not self.ready and not self.closed and time.time() < end:
            r, _, _ = select.select([self.s], [], [], max(0.0, end - time.time()))
            if r:
                self.ready.extend(self.pump())
        return self.ready.popleft() if self.ready else None




PROTOCOL = 3  # RS_PROTOCOL_VERSION (common/proto.h)


def join_msg(challenge, token, worker, addr, protocol=PROTOCOL, model=""):
    """A join proving token (common/proto.h, "The join handshake") for challenge (its text), as bytes; protocol
    None leaves the version out (a join from before joins carried it); model: the model config's digest (a
    worker's join, which names its transport addr, carries it; a tool's carries none)."""
    c = json.loads(challenge)
    nonce = os.urandom(16).hex()
    j = {"type": "join", "worker": worker, "addr": addr, "pid": 1, "nonce": nonce}
    if protocol is not None:
        j["protocol"] = protocol
    parts = [c["nonce"], c["epoch"], nonce, worker, addr, "1", "", str(protocol or 0)]
    if model:  # bound last, and only when announced (rs_proto_join_proof)
        j["model"] = model
        parts.append(model)
    msg = b"rowshift join\0" + b"".join(p.encode() + b"\0" for p in parts)
    j["proof"] = hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()
    return json.dumps(j).encode()


def answer_proof(challenge, token, join, answer):
    """The coordinator's proof of its answer (welcome: "welcome", refused: the reason) to join (bytes)."""
    c, j = json.loads(challenge), json.loads(join)
    parts = [j["nonce"], c["nonce"], c["epoch"], j["worker"], answer]
    msg = b"rowshift answer\0" + b"".join(p.encode() + b"\0" for p in parts)
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()
