#!/bin/bash
# hostile.sh - nothing unauthenticated costs the coordinator more than a few
# KiB or a few seconds: while a local job trains, 500 WebSockets that never
# join, 300 silent TCP connections and one 16 MiB message before any join
# are thrown at its port, with its descriptors limited to 512. The
# coordinator's peak memory stays under 64 MiB, every idle connection is
# closed within the join deadline (10 s), /healthz answers throughout, the
# log is not flooded, and training goes on. Then, during a rescale, an idle
# connection to every worker's transport listener (opened while the workers
# wait before connecting their mesh): the reshard commits at the first
# attempt (with the old blocking handshake every attempt timed out). Then a
# flood: 600 connections kept open to every worker listener during a
# rescale, more than a listener keeps in their handshake (256) and its old
# backlog (256) together, a new one for each the worker closes: the reshard
# still commits at the first attempt (when a full table stopped the
# listener accepting, every attempt timed out and the job gave up).
set -u
. "$(dirname "$0")/../lib/itest.sh"

port=$(free_port)
(
	ulimit -n 512
	exec "$bin/rowshift-coordinator" --local --workers 2 --config examples/dlrm-small.json --steps 100000 \
		--listen 127.0.0.1:$port --admin-file "$tmp/admin.json" >"$tmp/run.out" 2>"$tmp/run.err"
) &
coord=$!
wait_for "$tmp/run.out" "^step " 60
before=$(grep -c "^step " "$tmp/run.out")
timeout 120 python3 tests/integration/hostile_clients.py $port $coord 16 >"$tmp/hostile.json" 2>"$tmp/hostile.err"
cat "$tmp/hostile.json"
sleep 1
after=$(grep -c "^step " "$tmp/run.out")
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$tmp/hostile.json" "$1"; }
check "the clients got their connections (some WebSockets refused at the cap of 64 unjoined)" \
	test "$(field tcp_opened)" -gt 0 -a "$(field ws_opened)" -gt 0
check "the coordinator's peak memory stayed under 64 MiB ($(field peak_kib) KiB)" test "$(field peak_kib)" -lt 65536
check "every idle connection was closed within the join deadline ($(field still_open) left open after 16 s)" \
	test "$(field still_open)" = 0
check "the 16 MiB message before a join was cut off" test "$(field big_closed)" = True
check "/healthz answered throughout ($(field healthz_failed) failures)" test "$(field healthz_failed)" = 0
check "the log was not flooded: refusals at most once a second ($(wc -l <"$tmp/run.err") lines)" \
	test "$(wc -l <"$tmp/run.err")" -lt 100
check "training went on ($before -> $after progress lines)" test "$after" -gt "$before"
check "the coordinator is still up" kill -0 $coord
kill $coord 2>/dev/null
{ wait $coord; } 2>/dev/null

# an idle connection to every worker listener during a rescale
port=$(free_port)
ROWSHIFT_FAULT=stall-connect-ms=1500 "$bin/rowshift-coordinator" --local --workers 2 --config examples/dlrm-small.json \
	--steps 80 --schedule 30:3 --listen 127.0.0.1:$port --timeout-ms 10000 --admin-file "$tmp/admin2.json" \
	>"$tmp/idle.out" 2>"$tmp/idle.err" &
coord=$!
timeout 120 python3 tests/integration/idle_listeners.py 20 $coord >"$tmp/idle.json" &
idle=$!
timeout 120 tail --pid=$coord -f /dev/null
wait $coord
rc=$?
wait $idle
cat "$tmp/idle.json"
check "idle connections were open to every listener: the 2 old workers' and the joiner's" python3 -c "
import json; assert json.load(open('$tmp/idle.json'))['connected'] >= 3"
check "the rescale committed at the first attempt (exit $rc)" bash -c \
	"grep -q 'generation 2 committed: 2 -> 3 workers' '$tmp/idle.out' && ! grep -q aborted '$tmp/idle.out'"

# more connections than a listener keeps in their handshake, to every worker listener during a rescale
port=$(free_port)
ROWSHIFT_FAULT=stall-connect-ms=1500 "$bin/rowshift-coordinator" --local --workers 2 --config examples/dlrm-small.json \
	--steps 80 --schedule 30:3 --listen 127.0.0.1:$port --timeout-ms 10000 --admin-file "$tmp/admin3.json" \
	>"$tmp/flood.out" 2>"$tmp/flood.err" &
coord=$!
timeout 150 python3 tests/integration/idle_listeners.py --per 600 120 $coord >"$tmp/flood.json" &
flood=$!
timeout 150 tail --pid=$coord -f /dev/null
wait $coord
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
