#!/bin/bash
# hostile.sh - nothing unauthenticated costs the coordinator more than a few
# KiB or a few seconds: while a local job trains, 500 WebSockets that never
# join, 300 silent TCP connections and one 16 MiB message before any join
# are thrown at its port, with its descriptors limited to 512. The
# coordinator's peak memory stays under 64 MiB, every idle connection is
# closed within the deadlines (2 s to join, checked at 10 s), /healthz answers throughout, the
# log is not flooded, and training goes on. Then, during a rescale, an idle
# connection to every worker's transport listener (opened while the workers
# wait before connecting their mesh): the reshard commits at the first
# attempt (with the old blocking handshake every attempt timed out). Then a
# flood: 600 connections kept open to every worker listener during a
# rescale, more than a listener keeps in their handshake (256) and its old
# backlog (256) together, a new one for each the worker closes: the reshard
# still commits at the first attempt (when a full table stopped the
# listener accepting, every attempt timed out and the job gave up).
# Also against the first coordinator: a join key carrying a newline and a
# forged log line stays on its refusal's line; 100 idle connections held
# open (one reopened for each the server closes) never lock a joiner out
# (the oldest is closed to make room; a cap that refused newcomers let 0
# of 10 join); a flood of refusals is logged at a bounded rate; a page of
# another site that DNS rebinding points here is refused, a port-forward's
# localhost is not. Against a coordinator of its own: 600 status clients
# that never read, at most 512 of them taken, memory bounded. And a worker
# against an impostor on its coordinator's address: an 8 MiB message and
# a flood before any proof cost it a few MiB (parsed, the message took
# 620 MiB), and it hangs up.
set -u
. "$(dirname "$0")/../lib/itest.sh"
light=$tmp/light.json # a lighter dlrm-small: these jobs train until stopped
light_config examples/dlrm-small.json "$light"

port=$(free_port)
(
	ulimit -n 512
	exec "$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 100000 \
		--listen 127.0.0.1:$port --admin-file "$tmp/admin.json" >"$tmp/run.out" 2>"$tmp/run.err"
) &
coord=$!
wait_for "$tmp/run.out" "^step " 60
before=$(grep -c "^step " "$tmp/run.out")
timeout 30 python3 tests/integration/hostile_clients.py inject $port 03:14:25.000 >"$tmp/inject.json"
cat "$tmp/inject.json"
timeout 120 python3 tests/integration/hostile_clients.py $port $coord 10 >"$tmp/hostile.json" 2>"$tmp/hostile.err"
cat "$tmp/hostile.json"
sleep 1
after=$(grep -c "^step " "$tmp/run.out")
# values FILE KEY...: the JSON object's values, space-separated
values() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(*(r[k] for k in sys.argv[2:]))' "$@"; }
read -r tcp ws peak open big failed <<<"$(values "$tmp/hostile.json" tcp_opened ws_opened peak_kib still_open big_closed \
	healthz_failed)"
check "the clients got their connections (past the unjoined cap, a quarter of the descriptors here, the oldest closed for the newest)" \
	test "$tcp" -gt 0 -a "$ws" -gt 0
check "the coordinator's peak memory stayed under 64 MiB ($peak KiB)" test "$peak" -lt 65536
check "every idle connection was closed within the deadlines ($open left open after 10 s)" test "$open" = 0
check "the 16 MiB message before a join was cut off" test "$big" = True
check "/healthz answered throughout ($failed failures)" test "$failed" = 0
check "the log was not flooded: refusals at most once a second ($(wc -l <"$tmp/run.err") lines)" \
	test "$(wc -l <"$tmp/run.err")" -lt 100
check "training went on ($before -> $after progress lines)" test "$after" -gt "$before"
check "the forged key was refused, and logged on the refusal's line, escaped" bash -c \
	"grep -q refused '$tmp/inject.json' && grep -q '.03:14:25.000 INFO' '$tmp/run.err'"
check "no log line is the forged one ($(grep -c '^03:14:25.000' "$tmp/run.err") lines)" bash -c \
	"! grep -q '^03:14:25.000' '$tmp/run.err' && ! grep -q \$'\\x1b' '$tmp/run.err'"
timeout 120 python3 tests/integration/hostile_clients.py lockout $port "$tmp/admin.json" 10 >"$tmp/lockout.json"
cat "$tmp/lockout.json"
read -r opened joined <<<"$(values "$tmp/lockout.json" idle_opened joins_ok)"
check "10 joins among 100 idle connections held open all got in ($joined)" test "$opened" -ge 100 -a "$joined" = 10
lines=$(wc -l <"$tmp/run.err")
timeout 120 python3 tests/integration/hostile_clients.py refusals $port 300 >"$tmp/refusals.json"
cat "$tmp/refusals.json"
lines=$(( $(wc -l <"$tmp/run.err") - lines ))
read -r sent refused secs <<<"$(values "$tmp/refusals.json" sent refused seconds)"
check "600 refusals in ${secs%.*} s (300 malformed joins refused and closed, 300 pages of another site) took $lines log lines" \
	test "$sent" = 600 -a "$refused" = 300 -a "$lines" -le $((15 + ${secs%.*})) # ten at once, then one a second
python3 tests/integration/ws_probe.py $port rebind >"$tmp/rebind.out" 2>&1
cat "$tmp/rebind.out"
check "a page of another site, rebound to this address, is refused; a port-forward's localhost is not" bash -c \
	"grep -q '^status rebind.example: ' '$tmp/rebind.out' && ! grep -q 'rebind.example: \(101\|200\)' '$tmp/rebind.out' &&
	 grep -qx 'status localhost: 101' '$tmp/rebind.out' && grep -qx 'control localhost: 101' '$tmp/rebind.out' &&
	 grep -qx 'page localhost: 200' '$tmp/rebind.out'"
check "the coordinator is still up" kill -0 $coord
kill $coord 2>/dev/null
{ wait $coord; } 2>/dev/null

# status clients that never read a byte, past the cap of 512 (the job starts while a worker meets an impostor)
port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 100000 \
	--listen 127.0.0.1:$port --admin-file "$tmp/admin-status.json" >"$tmp/status.out" 2>"$tmp/status.err" &
coord=$!

# a worker against an impostor on its coordinator's address
timeout 120 python3 tests/integration/hostile_clients.py impostor "$bin/rowshift-worker" "$light" \
	>"$tmp/impostor.json"
cat "$tmp/impostor.json"
read -r conns cut peak wrc <<<"$(values "$tmp/impostor.json" connections big_cut_off worker_peak_kib worker_exit)"
check "a worker hung up on an impostor's 8 MiB message before any proof (peak memory $peak KiB, bound 64 MiB)" \
	test "$conns" = 2 -a "$cut" = True -a "$peak" -gt 0 -a "$peak" -lt 65536
check "it gave up on the impostor by itself (exit $wrc)" test "$wrc" -gt 0

wait_for "$tmp/status.out" "^step " 60
timeout 120 python3 tests/integration/hostile_clients.py status $port $coord 600 2 >"$tmp/status.json"
cat "$tmp/status.json"
read -r up refused rss0 rss1 <<<"$(values "$tmp/status.json" upgraded refused rss_before_kib rss_peak_kib)"
check "600 status clients that never read: 512 taken, the rest refused" test "$up" = 512 -a "$refused" = 88
check "the coordinator's memory grew by $(( (rss1 - rss0) / 1024 )) MiB with them (bound 32 MiB)" test $((rss1 - rss0)) -lt 32768
check "the job trained on" kill -0 $coord
kill $coord 2>/dev/null
{ wait $coord; } 2>/dev/null

# an idle connection to every worker listener during a rescale
port=$(free_port)
ROWSHIFT_FAULT=stall-connect-ms=1500 "$bin/rowshift-coordinator" --local --workers 2 --config "$light" \
	--steps 80 --schedule 30:3 --listen 127.0.0.1:$port --timeout-ms 10000 --admin-file "$tmp/admin2.json" \
	>"$tmp/idle.out" 2>"$tmp/idle.err" &
coord=$!
timeout 120 python3 tests/integration/idle_listeners.py 20 $coord >"$tmp/idle.json" &
idle=$!
wait_pid $coord 120
rc=$?
wait $idle
cat "$tmp/idle.json"
check "idle connections were open to every listener: the 2 old workers' and the joiner's" python3 -c "
import json; assert json.load(open('$tmp/idle.json'))['connected'] >= 3"
check "the rescale committed at the first attempt (exit $rc)" bash -c \
	"grep -q 'generation 2 committed: 2 -> 3 workers' '$tmp/idle.out' && ! grep -q aborted '$tmp/idle.out'"

# more connections than a listener keeps in their handshake, to every worker listener during a rescale
port=$(free_port)
ROWSHIFT_FAULT=stall-connect-ms=1500 "$bin/rowshift-coordinator" --local --workers 2 --config "$light" \
	--steps 80 --schedule 30:3 --listen 127.0.0.1:$port --timeout-ms 10000 --admin-file "$tmp/admin3.json" \
	>"$tmp/flood.out" 2>"$tmp/flood.err" &
coord=$!
timeout 150 python3 tests/integration/idle_listeners.py --per 600 120 $coord >"$tmp/flood.json" &
flood=$!
wait_pid $coord 150
rc=$?
wait $flood
cat "$tmp/flood.json"
check "more than 256 connections were open at once to every listener: the 2 old workers' and the joiner's" python3 -c "
import json; peak = sorted(json.load(open('$tmp/flood.json'))['peak'].values()); assert len(peak) >= 3 and peak[-3] > 256, peak"
check "the rescale committed at the first attempt under the flood (exit $rc)" bash -c \
	"grep -q 'generation 2 committed: 2 -> 3 workers' '$tmp/flood.out' && ! grep -q aborted '$tmp/flood.out'"
check "the workers' log was not flooded: refusals at most once a second ($(grep -c 'refused' "$tmp/flood.err") lines)" \
	test "$(grep -c 'refused' "$tmp/flood.err")" -lt 60
finish_checks hostile
