#!/bin/bash
# status.sh - the coordinator's status stream, /metrics and health
# endpoints, with the real binaries in local mode:
#   1. `rowshiftctl status --watch --json` (a C client of the stream) through
#      a 2 -> 4 -> 3 run sees the snapshot first, every phase of both
#      reshards, migration progress reaching 100%, progress events and the end;
#   2. the one-shot summary, /metrics in Prometheus text, /healthz, /readyz;
#   3. bad input on /status (an oversized message closes that client only;
#      garbage and a control command are ignored and change nothing);
#      a status token keeps out clients without it; a WebSocket without
#      the subprotocol is told so (400), not left hanging;
#   4. 200 status clients, half of which never read, through a reshard:
#      the job goes on, the readers see the reshard, the coordinator's memory
#      stays bounded.
set -u
. "$(dirname "$0")/../lib/itest.sh"
cfg=examples/dlrm-small.json
light=$tmp/light.json # for the jobs that train until stopped
light_config $cfg "$light"
http() { python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); sys.stdout.write(e.read().decode())
PY
}

# 1. the stream through two reshards at the pause (pre-copy off: its phases and progress bars are the subject here)
with_precopy "$cfg" false "$tmp/stw.json"
port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config "$tmp/stw.json" --steps 200 --schedule 60:4,130:3 \
	--listen 127.0.0.1:$port --admin-file "$tmp/admin.json" --log-json "$tmp/run.jsonl" >"$tmp/run.out" 2>"$tmp/run.err" &
job=$!
wait_for "$tmp/admin.json" url 30
timeout 120 "$bin/rowshiftctl" status --watch --json --admin-file "$tmp/admin.json" >"$tmp/stream.json" 2>"$tmp/stream.err"
check "rowshiftctl status --watch follows the job to its end (exit $?)" test -s "$tmp/stream.json"
check "the stream shows the snapshot, every phase of both reshards, progress to 100% and the end" python3 - "$tmp/stream.json" <<'PY'
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
types = [m["type"] for m in msgs]
assert types[0] == "snapshot", types[:3]
phases = [(m["phase"], m.get("attempt")) for m in msgs if m["type"] == "phase"]
for attempt in (2, 3):
    seq = [p for p, a in phases if a == attempt]
    assert seq == ["migrating", "committing"], (attempt, phases)
assert [p for p, _ in phases].count("paused") == 2 and [p for p, _ in phases].count("training") >= 2, phases
assert phases[-1][0] == "done", phases
for gen in (2, 3):
    mig = [m for m in msgs if m["type"] == "migration" and m["generation"] == gen]
    assert mig and mig[-1]["moved"] == mig[-1]["total"] > 0, (gen, mig[-1:] if mig else None)
    assert all(p["bytes"] == p["total"] for p in mig[-1]["pairs"]) and mig[-1]["pairs"], mig[-1]
    assert all(a["moved"] <= b["moved"] for a, b in zip(mig, mig[1:])), "progress went backwards"
res = [m for m in msgs if m["type"] == "reshard"]
assert [(r["from"], r["to"], r["step"]) for r in res] == [(2, 4, 60), (4, 3, 130)], res
assert all(0 < r["stopped_s"] <= r["pause_s"] for r in res), ("the pause and the part stopped", res)
prog = [m["step"] for m in msgs if m["type"] == "progress"]
assert prog and prog == sorted(prog) and prog[-1] == 200, prog[-5:]
assert any(m["type"] == "member" and m["event"] == "joined" for m in msgs)
assert any(m["type"] == "member" and m["event"] == "draining" and m["name"] == "worker-3" for m in msgs)
last = [m for m in msgs if m["type"] == "snapshot" and m["generation"] == 3][-1]
names = sorted(x["name"] for x in last["members"])
assert names == ["worker-0", "worker-1", "worker-2"], ("the member that left is still listed", names)
print(len(msgs), "messages:", {t: types.count(t) for t in set(types)})
PY
wait $job
check "--log-json's reshard lines carry the pause and the part of it the world stood still" python3 - "$tmp/run.jsonl" <<'PY'
import json, sys
res = [m for m in map(json.loads, open(sys.argv[1])) if m.get("event") == "reshard"]
assert len(res) == 2 and all(0 < r["stopped_s"] <= r["pause_s"] for r in res), res
PY

# 2. one shot, metrics, health
port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 100000 --listen 127.0.0.1:$port \
	--admin-file "$tmp/admin2.json" >"$tmp/run2.out" 2>"$tmp/run2.err" &
job=$!
wait_for "$tmp/run2.out" "^step" 30
"$bin/rowshiftctl" status --admin-file "$tmp/admin2.json" >"$tmp/oneshot.out" 2>&1
check "rowshiftctl status prints a summary with every member" bash -c \
	"grep -q 'generation 1, training' $tmp/oneshot.out && grep -q 'worker-1 .*rank 1' $tmp/oneshot.out"
http "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt"
check "/metrics is Prometheus text with the job's figures" python3 - "$tmp/metrics.txt" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "200", lines[0]
samples = {}
for l in lines[1:]:
    if l.startswith("#"):
        assert re.match(r"# (HELP|TYPE) rowshift_\w+ ", l), l
        continue
    name, value = l.rsplit(" ", 1)
    samples[name] = float(value)
assert samples["rowshift_generation"] == 1 and samples["rowshift_members"] == 2
assert samples['rowshift_phase{phase="training"}'] == 1 and samples['rowshift_phase{phase="failed"}'] == 0
assert samples["rowshift_step"] > 0 and samples["rowshift_samples_per_second"] > 0 and samples["rowshift_loss"] > 0
assert 'rowshift_member_step_lag{member="worker-1",rank="1"}' in samples
assert samples['rowshift_reshard_pause_seconds_bucket{le="+Inf"}'] == samples["rowshift_reshards_total"] == 0
assert samples["rowshift_reshard_stopped_seconds_total"] == 0
print(len(samples), "samples")
PY
codes="$(http http://127.0.0.1:$port/healthz | head -1) $(http http://127.0.0.1:$port/readyz | head -1) $(http http://127.0.0.1:$port/nope | head -1)"
check "/healthz and /readyz answer 200, an unknown path 404 ($codes)" test "$codes" = "200 200 404"

# 3. bad input, and nothing a status client says changes the job
python3 tests/integration/status_clients.py probe $port oversized >"$tmp/probe1.out" 2>&1
check "an oversized message on /status closes that client" bash -c "tail -1 $tmp/probe1.out | grep -q closed"
python3 tests/integration/status_clients.py probe $port garbage >"$tmp/probe2.out" 2>&1
check "garbage and a scale command on /status are ignored: the stream goes on" bash -c \
	"tail -1 $tmp/probe2.out | grep -q open && grep -q 'got: progress' $tmp/probe2.out"
"$bin/rowshiftctl" status --admin-file "$tmp/admin2.json" >"$tmp/after.out" 2>&1
check "the job still has 2 workers and trains (the status stream is read-only)" bash -c \
	"grep -q ' 2 workers' $tmp/after.out && kill -0 $job && ! grep -q 'scale to' $tmp/run2.err"
kill $job; wait $job 2>/dev/null
port=$(free_port)
ROWSHIFT_STATUS_TOKEN=s3cret "$bin/rowshift-coordinator" --local --workers 1 --config "$light" --steps 100000 \
	--listen 127.0.0.1:$port --admin-file "$tmp/admin3.json" >/dev/null 2>"$tmp/run3.err" &
job=$!
wait_for "$tmp/admin3.json" url 30
check "with a status token, a client without it is refused" bash -c \
	"[ \"\$(python3 tests/integration/status_clients.py connect $port)\" = refused ]"
check "a client with it gets the snapshot" bash -c \
	"[ \"\$(python3 tests/integration/status_clients.py connect $port s3cret)\" = snapshot ]"
check "rowshiftctl finds the token in the admin file" bash -c "$bin/rowshiftctl status --admin-file $tmp/admin3.json | grep -q generation"
check "the token is not taken from the URL (it would end up in logs)" bash -c \
	"python3 -c 'import sys; sys.path.insert(0, \"tests/integration\"); import wslib; print(wslib.connect($port, \"rowshift-status\", \"/status?token=s3cret\"))' | grep -qx None"
check "a browser presents it as a subprotocol, as the dashboard does" bash -c \
	"python3 -c 'import sys; sys.path.insert(0, \"tests/integration\"); import wslib; print(wslib.connect($port, \"rowshift-status, bearer.czNjcmV0\", \"/status\"))' | grep -q socket"
check "/metrics wants the token too" bash -c \
	"curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/metrics | grep -qx 401 && curl -sf -H 'Authorization: Bearer s3cret' http://127.0.0.1:$port/metrics | grep -q rowshift_generation"
check "the probes do not" bash -c "curl -sf http://127.0.0.1:$port/healthz >/dev/null"
check "a WebSocket asking for no subprotocol (a browser's new WebSocket(url), websocat) is answered 400 naming it, not left hanging" \
	bash -c "curl -s -i --max-time 5 -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' \
	 -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' http://127.0.0.1:$port/status >$tmp/noproto.txt;
	 head -1 $tmp/noproto.txt | grep -q ' 400 ' && grep -q 'subprotocol rowshift-status' $tmp/noproto.txt"
kill $job; wait $job 2>/dev/null

# 4. 200 clients, half of them never reading, through a reshard
port=$(free_port)
"$bin/rowshift-coordinator" --local --workers 2 --config "$light" --steps 100000 --listen 127.0.0.1:$port \
	--admin-file "$tmp/admin4.json" >"$tmp/run4.out" 2>"$tmp/run4.err" &
job=$!
wait_for "$tmp/run4.out" "^step" 30
rss() { awk '/VmRSS/ {print $2}' /proc/$job/status; }
before=$(rss)
python3 tests/integration/status_clients.py crowd $port 200 8 >"$tmp/crowd.json" &
crowd=$!
sleep 2
"$bin/rowshiftctl" scale --workers 3 --admin-file "$tmp/admin4.json" >/dev/null
wait_for "$tmp/run4.out" "resumed at step" 30
peak=$before
while kill -0 $crowd 2>/dev/null; do r=$(rss); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.2; done
wait $crowd
check "with 200 status clients (100 never reading) the reshard went through" grep -q "generation 2 resumed at step" "$tmp/run4.out"
check "every reading client stayed connected and saw the reshard and the new snapshot" python3 -c "
import json; r = json.load(open('$tmp/crowd.json')); print(r)
assert r['readers_connected'] == r['readers'] == 100 and r['stalled'] == 100
assert r['types']['reshard'] == 100 and r['types']['snapshot'] >= 200 and r['fewest'] > 5"
check "the coordinator's memory grew by $(( (peak - before) / 1024 )) MiB (bound 64 MiB)" test $((peak - before)) -lt 65536
kill $job; wait $job 2>/dev/null

[ "$fails" = 0 ] || tail -n 20 "$tmp"/*.err
echo "status: $fails failed"
[ "$fails" = 0 ]
