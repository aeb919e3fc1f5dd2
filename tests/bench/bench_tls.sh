#!/bin/bash
# bench_tls.sh - what TLS on the coordinator's port (--tls-cert, --tls-key)
# costs: the same local job of examples/dlrm-small.json (2 workers, a
# reshard 2 -> 3 at step 150 of 300) with and without TLS, three times each,
# alternating (this machine is noisy). Prints, side by side as ratios: the
# reshard's pause, training throughput, and the time rowshiftctl takes to
# connect and read the status snapshot (20 in a row; each is a fresh TLS
# handshake). Reference: the plain run in the same bench. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
	-days 2 -subj /CN=rowshift-bench -addext "subjectAltName=IP:127.0.0.1" 2>"$tmp/openssl.err" ||
	{ echo "bench tls: openssl could not make a certificate" >&2; cat "$tmp/openssl.err" >&2; exit 1; }

run() { # run NAME FLAGS...: prints "PAUSE SAMPLES_PER_S STATUS_S"
	local name=$1 port job
	shift
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config examples/dlrm-small.json --steps 300 \
		--schedule 150:3 --listen 127.0.0.1:$port --admin-file "$tmp/$name.admin" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	job=$!
	for _ in $(seq 1 600); do grep -q "^step" "$tmp/$name.out" 2>/dev/null && break; sleep 0.05; done
	local t0 t1
	t0=$(date +%s.%N)
	for _ in $(seq 1 20); do
		timeout 20 "$bin/rowshiftctl" status --json --admin-file "$tmp/$name.admin" >/dev/null 2>>"$tmp/$name.ctl" ||
			{ echo "bench tls: rowshiftctl status failed ($name)" >&2; cat "$tmp/$name.ctl" >&2; return 1; }
	done
	t1=$(date +%s.%N)
	wait $job || { echo "bench tls: the $name run failed" >&2; tail -3 "$tmp/$name.err" >&2; return 1; }
	python3 - "$tmp/$name.out" "$t0" "$t1" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
pause = re.search(r"resumed at step 150: paused ([0-9.]+) s", text)
rates = [float(x) for x in re.findall(r"^step +\d+ .* (\d+) samples/s", text, re.M)]
if not pause or not rates:
    sys.exit("bench tls: no pause or throughput in " + sys.argv[1])
print(pause.group(1), statistics.median(rates), (float(sys.argv[3]) - float(sys.argv[2])) / 20)
PY
}
results=()
for i in 1 2 3; do
	r=$(run plain$i) || exit 1
	results+=("plain $r")
	r=$(run tls$i --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem") || exit 1
	results+=("tls $r")
done
printf '%s\n' "${results[@]}" >"$tmp/results"
python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(kind, i): return statistics.median(float(r[i]) for r in rows if r[0] == kind)
p, t = med("plain", 1), med("tls", 1)
print(f"bench tls_reshard_pause: {t:.3f} s over TLS | {p:.3f} s plain (medians of 3, alternating) | ratio {t / p:.2f}")
p, t = med("plain", 2), med("tls", 2)
print(f"bench tls_train_throughput: {t:.0f} samples/s over TLS | {p:.0f} plain | ratio {t / p:.2f}")
p, t = med("plain", 3), med("tls", 3)
print(f"bench tls_status_connect: rowshiftctl status {t * 1000:.1f} ms over TLS | {p * 1000:.1f} ms plain | ratio {t / p:.2f}")
PY
