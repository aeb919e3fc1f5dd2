#!/bin/bash
# bench_status.sh - what 200 status clients cost a reshard: the same 2 -> 4
# reshard of examples/bench-1g.json (about 1 GB of state) without clients,
# then with 200 clients of the status stream of which half never read a
# byte, three times each, alternating (this machine is noisy: the pause
# depends mostly on how fast fresh memory comes). Prints the median pauses
# side by side (target: at most 10% longer) and the coordinator's peak
# memory. Fails when a run fails.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
run() { # run NAME CLIENTS: one job with a reshard at step 10; prints "PAUSE PEAK_KIB"
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config examples/bench-1g.json --steps 20 \
		--schedule 10:4 --listen 127.0.0.1:$port >"$tmp/$1.out" 2>"$tmp/$1.err" &
	local job=$! peak=0 crowd=
	for _ in $(seq 1 600); do grep -q "^step" "$tmp/$1.out" 2>/dev/null && break; sleep 0.1; done
	if [ "$2" -gt 0 ]; then
		python3 tests/integration/status_clients.py crowd $port "$2" 60 >"$tmp/$1.crowd" 2>&1 &
		crowd=$!
	fi
	while kill -0 $job 2>/dev/null; do
		r=$(awk '/VmRSS/ {print $2}' /proc/$job/status 2>/dev/null || echo 0)
		[ "${r:-0}" -gt "$peak" ] && peak=$r
		sleep 0.1
	done
	wait $job || { echo "bench status: the $1 run failed" >&2; tail -3 "$tmp/$1.err" >&2; return 1; }
	[ -n "$crowd" ] && kill $crowd 2>/dev/null
	echo "$(sed -n 's/.*resumed at step 10: paused \([0-9.]*\) s.*/\1/p' "$tmp/$1.out") $peak"
}
results=()
for i in 1 2 3; do
	results+=("quiet $(run quiet$i 0)") || exit 1
	results+=("busy $(run busy$i 200)") || exit 1
done
printf '%s\n' "${results[@]}" >"$tmp/results"
python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
if any(len(r) != 3 for r in rows):
    print("bench status: a run reported no pause"); sys.exit(1)
def med(kind, i): return statistics.median(float(r[i]) for r in rows if r[0] == kind)
q, b = med("quiet", 1), med("busy", 1)
verdict = "MET" if b / q <= 1.10 else "MISSED"
print(f"bench status_200_clients: reshard pause {b:.3f} s with 200 status clients (100 never reading) | "
      f"{q:.3f} s without (medians of 3, alternating) | ratio {b / q:.2f} | target <= 1.10 {verdict} | "
      f"coordinator memory at peak {med('busy', 2) / 1024:.1f} MiB vs {med('quiet', 2) / 1024:.1f} MiB")
PY
