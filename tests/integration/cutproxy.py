"""cutproxy.py PORT_FILE UPSTREAM_PORT CUT_FILE HOLD_FILE - a TCP proxy to
127.0.0.1:UPSTREAM_PORT that stands in for a broken network (TLS passes through untouched):
  - while CUT_FILE exists (a partition), every connection through it is closed, and new
    ones are closed at once;
  - when HOLD_FILE appears, the connections open at that moment go silent for good: what
    either side sends is dropped, and neither is told (a NAT or a load balancer that forgot
    them). Connections made later work.
Writes the port it listens on (127.0.0.1, any free one) to PORT_FILE. Python 3 standard
library."""
import os
import socket
import sys
import threading
import time

port_file, upstream, cut_file, hold_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
live, silenced, lock = set(), set(), threading.Lock()


def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            if a not in silenced:
                b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(c):
    try:
        u = socket.create_connection(("127.0.0.1", upstream), timeout=5)
        u.settimeout(None)
    except OSError:
        c.close()
        return
    with lock:
        live.update((c, u))
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
    pump(c, u)


def cutter():
    held = False
    while True:
        if os.path.exists(hold_file) and not held:
            with lock:
                silenced.update(live)
        held = os.path.exists(hold_file)
        if os.path.exists(cut_file):
            with lock:
                for s in list(live):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                live.clear()
        time.sleep(0.05)


ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(64)
with open(port_file + ".tmp", "w") as f:
    f.write(str(ls.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
threading.Thread(target=cutter, daemon=True).start()
while True:
    conn, _ = ls.accept()
    if os.path.exists(cut_file):
        conn.close()
        continue
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
