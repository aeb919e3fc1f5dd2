#!/bin/bash
# bench_status.sh - what 200 status clients cost a reshard: the same 2 -> 4
# reshard of examples/bench-1g.json (about 1 GB of state, its rows moved at
# the pause: the cycle that streams the most progress) without clients,
# then with 200 clients of the status stream of which half never read a
# byte, connected before the reshard is asked for (rowshiftctl scale), five
# times each, alternating (this machine is noisy: the pause depends mostly
# on how fast fresh memory comes). Prints the median pauses side by side
# (target: at most 10% longer) and the coordinator's peak memory. Fails when
# a run fails.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
python3 - "$tmp/cfg.json" <<'PY'
import json, sys
c = json.load(open("examples/bench-1g.json"))
c.setdefault("cluster", {})["precopy"] = False
json.dump(c, open(sys.argv[1], "w"))
PY
wait_for() { # wait_for FILE PATTERN SECONDS
	for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
run() { # run NAME CLIENTS: one job rescaled 2 -> 4 once trained (and the clients connected); prints "PAUSE PEAK_KIB"
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config "$tmp/cfg.json" --steps 1000000 \
		--listen 127.0.0.1:$port --admin-file "$tmp/$1.admin" >"$tmp/$1.out" 2>"$tmp/$1.err" &
	local job=$! peak=0 crowd= r
	wait_for "$tmp/$1.out" "^step" 120 || { echo "bench status: the $1 run did not train" >&2; return 1; }
	if [ "$2" -gt 0 ]; then
		python3 tests/integration/status_clients.py crowd $port "$2" 120 >"$tmp/$1.crowd" 2>"$tmp/$1.crowd.err" &
		crowd=$!
		wait_for "$tmp/$1.crowd.err" "clients connected" 60 ||
			{ echo "bench status: the $1 run's clients did not connect" >&2; cat "$tmp/$1.crowd.err" >&2; return 1; }
	fi
	"$bin/rowshiftctl" scale --workers 4 --admin-file "$tmp/$1.admin" >/dev/null
	for _ in $(seq 1 600); do
		r=$(awk '/VmRSS/ {print $2}' /proc/$job/status 2>/dev/null || echo 0)
		[ "${r:-0}" -gt "$peak" ] && peak=$r
		grep -q "generation 2 resumed at step" "$tmp/$1.out" && break
		sleep 0.1
	done
	# the clients were there through the reshard: every reader saw it (before the job goes)
	if [ -n "$crowd" ] && ! wait_for "$tmp/$1.crowd.err" "every reader saw a reshard" 30; then
		echo "bench status: not every reader of $1 saw the reshard" >&2
		kill -INT $crowd; wait $crowd; cat "$tmp/$1.crowd" >&2
		return 1
	fi
	kill -INT $job 2>/dev/null
	for _ in $(seq 1 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
	kill -9 $job 2>/dev/null
	wait $job 2>/dev/null
	if [ -n "$crowd" ]; then
		kill -INT $crowd 2>/dev/null
		wait $crowd 2>/dev/null
	fi
	local pause
	pause=$(sed -n 's/.*generation 2 resumed at step [0-9]*: paused \([0-9.]*\) s.*/\1/p' "$tmp/$1.out")
	[ -n "$pause" ] || { echo "bench status: the $1 run reported no reshard" >&2; tail -3 "$tmp/$1.err" >&2; return 1; }
	echo "$pause $peak"
}
results=()
for i in 1 2 3 4 5; do
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
      f"{q:.3f} s without (medians of 5, alternating) | ratio {b / q:.2f} | target <= 1.10 {verdict} | "
      f"coordinator memory at peak {med('busy', 2) / 1024:.1f} MiB vs {med('quiet', 2) / 1024:.1f} MiB")
PY
