#!/bin/bash
# bench_status.sh - what 200 status clients cost a reshard: the same 2 -> 4
# reshard of examples/bench-1g.json (about 1 GB of state) without clients,
# then with 200 clients of the status stream of which half never read a
# byte, connected before the reshard is asked for (rowshiftctl scale) at
# the same step in both, five times each, alternating (this machine is
# noisy: the pause depends mostly on how fast fresh memory comes). Twice:
# with its rows moved at the pause (pre-copy off: the cycle that streams
# the most progress while stopped), then pre-copied (the default: a pause
# of tens of milliseconds, where any time taken from it shows). Prints the
# median pauses side by side (target: at most 10% longer), the range of
# the five paired ratios, and the coordinator's peak memory. Fails when a
# run fails.
#
# The clients run here, on the workers' cores, as no real client would:
# what they take to read the stream counts against the pause too.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import json, sys
for precopy in (False, True):
    c = json.load(open("examples/bench-1g.json"))
    c.setdefault("cluster", {})["precopy"] = precopy
    json.dump(c, open(f"{sys.argv[1]}/{'precopy' if precopy else 'stw'}.json", "w"))
PY
# every run is asked to reshard at this step: past the crowd's connecting, the same for runs with and without it
SCALE_AT=60
wait_for() { # wait_for FILE PATTERN SECONDS
	for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
reached() { # reached FILE STEP SECONDS: wait until the run's log shows a step at or past STEP
	for _ in $(seq 1 $(($3 * 10))); do
		awk -v s="$2" '$1 == "step" && $2 >= s {found = 1} END {exit !found}' "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
run() { # run NAME CLIENTS CONFIG: one job rescaled 2 -> 4 once trained (and the clients connected); prints "PAUSE PEAK_KIB"
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	RS_LOG_LEVEL=warn "$bin/rowshift-coordinator" --local --workers 2 --config "$3" --steps 1000000 \
		--listen 127.0.0.1:$port --admin-file "$tmp/$1.admin" >"$tmp/$1.out" 2>"$tmp/$1.err" &
	local job=$! peak=0 crowd= r
	# run is called in $(...): the EXIT trap does not see its jobs, so each way out of it ends them
	give_up() { echo "bench status: $*" >&2; kill -9 $job $crowd 2>/dev/null; wait $job $crowd 2>/dev/null; }
	wait_for "$tmp/$1.out" "^step" 120 || { give_up "the $1 run did not train"; return 1; }
	if [ "$2" -gt 0 ]; then
		python3 tests/integration/status_clients.py crowd $port "$2" 120 >"$tmp/$1.crowd" 2>"$tmp/$1.crowd.err" &
		crowd=$!
		wait_for "$tmp/$1.crowd.err" "clients connected" 60 ||
			{ cat "$tmp/$1.crowd.err" >&2; give_up "the $1 run's clients did not connect"; return 1; }
	fi
	reached "$tmp/$1.out" $SCALE_AT 120 || { give_up "the $1 run did not reach step $SCALE_AT"; return 1; }
	"$bin/rowshiftctl" scale --workers 4 --admin-file "$tmp/$1.admin" >/dev/null
	for _ in $(seq 1 600); do
		r=$(awk '/VmRSS/ {print $2}' /proc/$job/status 2>/dev/null || echo 0)
		[ "${r:-0}" -gt "$peak" ] && peak=$r
		grep -q "generation 2 resumed at step" "$tmp/$1.out" && break
		sleep 0.1
	done
	# the clients were there through the reshard: every reader saw it (before the job goes)
	if [ -n "$crowd" ] && ! wait_for "$tmp/$1.crowd.err" "every reader saw a reshard" 30; then
		kill -INT $crowd; wait $crowd; cat "$tmp/$1.crowd" >&2
		give_up "not every reader of $1 saw the reshard"
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
	pause=$(sed -n 's/.*generation 2 resumed at step \([0-9]*\): paused \([0-9.]*\) s.*/\2 \1/p' "$tmp/$1.out")
	[ -n "$pause" ] || { echo "bench status: the $1 run reported no reshard" >&2; tail -3 "$tmp/$1.err" >&2; return 1; }
	echo "$pause $peak"
}
measure() { # measure LINE CONFIG: five pairs of runs, then the line
	local results=() i
	for i in 1 2 3 4 5; do
		results+=("quiet $i $(run quiet$i 0 "$2")") || return 1
		results+=("busy $i $(run busy$i 200 "$2")") || return 1
	done
	printf '%s\n' "${results[@]}" >"$tmp/results"
	python3 - "$tmp/results" "$1" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
if any(len(r) != 5 for r in rows):
    print("bench status: a run reported no pause", file=sys.stderr); sys.exit(1)
def med(kind, i): return statistics.median(float(r[i]) for r in rows if r[0] == kind)
steps = sorted(int(r[3]) for r in rows)
pause = {(r[0], r[1]): float(r[2]) for r in rows}
paired = sorted(pause["busy", k] / pause["quiet", k] for _, k in pause if _ == "quiet")
q, b = med("quiet", 2), med("busy", 2)
verdict = "MET" if b / q <= 1.10 else "MISSED"
print(f"bench {sys.argv[2]}: reshard pause {b:.3f} s with 200 status clients (100 never reading) | "
      f"{q:.3f} s without (medians of 5, alternating) | ratio {b / q:.2f} | target <= 1.10 {verdict} | "
      f"coordinator memory at peak {med('busy', 4) / 1024:.1f} MiB vs {med('quiet', 4) / 1024:.1f} MiB | "
      f"paired ratios {paired[0]:.2f}-{paired[-1]:.2f}, resharded at steps {steps[0]}-{steps[-1]}")
PY
}
measure status_200_clients "$tmp/stw.json" || exit 1
measure status_200_clients_precopy "$tmp/precopy.json" || exit 1
