"""Raw clients of the coordinator's status stream (standard library only),
for tests: many at once, slow ones, and hostile ones.

usage:
  status_clients.py crowd PORT N SECONDS   N clients for SECONDS: half read
      everything, half never read a byte. Says on stderr when all are
      connected, and once every reader has seen a reshard; prints one JSON
      line (at the end, or on SIGINT): how many readers stayed connected,
      the message types they saw, the fewest messages any reader got, how
      many readers saw a reshard.
  status_clients.py probe PORT CASE        bad input on /status:
      oversized   a 64 KiB message: the server closes this client only
      garbage     invalid JSON, a binary frame and a control-channel
                  "scale" command: ignored, the stream goes on
      Prints what came back, then "closed" or "open".
  status_clients.py connect PORT [TOKEN]   one client: prints the first
      message's type, or "refused" when the handshake is refused.
"""
import collections
import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wslib  # noqa: E402


def connect(port, token=None):
    return wslib.connect(port, "rowshift-status", "/status", token)


send = wslib.send
Reader = wslib.Reader


def crowd(port, n, seconds):
    # a background job of a script starts with SIGINT ignored: take it back, so that SIGINT ends the crowd
    signal.signal(signal.SIGINT, signal.default_int_handler)
    readers, stalled = [], []
    for i in range(n):
        c = connect(port)
        if c is None:
            raise SystemExit(f"client {i} was refused")
        s, rest = c
        if i % 2:
            s.setblocking(False)
            stalled.append(s)  # never read from: the server must not wait for it
        else:
            s.setblocking(False)
            readers.append(Reader(s, rest))
    print(f"crowd: {n} clients connected", file=sys.stderr, flush=True)
    seen = collections.Counter()
    counts = [0] * len(readers)
    reshards = [0] * len(readers)
    told = False
    end = time.time() + seconds
    try:
        while time.time() < end:
            live = [r for r in readers if not r.closed]
            if not live:
                break
            ready, _, _ = select.select([r.s for r in live], [], [], 0.2)
            for r in live:
                if r.s in ready:
                    k = readers.index(r)
                    for f in r.pump():
                        try:
                            kind = json.loads(f)["type"]
                        except ValueError:
                            kind = "(not json)"
                        seen[kind] += 1
                        counts[k] += 1
                        reshards[k] += kind == "reshard"
            if not told and all(reshards):
                print("crowd: every reader saw a reshard", file=sys.stderr, flush=True)
                told = True
    except KeyboardInterrupt:  # SIGINT ends the crowd early, with its report
        pass
    print(json.dumps({"readers_connected": sum(not r.closed for r in readers), "readers": len(readers),
                      "stalled": len(stalled), "types": seen, "fewest": min(counts) if counts else 0,
                      "saw_reshard": sum(1 for x in reshards if x)}))


def probe(port, case):
    c = connect(port)
    if c is None:
        raise SystemExit("refused")
    s, rest = c
    r = Reader(s, rest)
    first = r.next(10)
    print("first:", json.loads(first)["type"] if first else None)
    if case == "oversized":
        send(s, b'{"type":"x","pad":"' + b"a" * (64 << 10) + b'"}')
    elif case == "garbage":
        send(s, b"{this is not json")
        send(s, b"\x00\x01\x02binary", opcode=2)
        send(s, b'{"type":"scale","workers":1}')
    end = time.time() + 4
    while time.time() < end and not r.closed:
        m = r.next(0.5)
        if m:
            print("got:", json.loads(m)["type"])
    print("closed" if r.closed else "open")


def main():
    if sys.argv[1] == "crowd":
        crowd(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1] == "probe":
        probe(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "connect":
        c = connect(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
        if c is None:
            print("refused")
            return
        m = Reader(*c).next(10)
        print(json.loads(m)["type"] if m else "nothing")


main()
