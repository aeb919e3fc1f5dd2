#!/bin/bash
# k8s_complete.sh - a Kubernetes job runs to completion, once, with the real
# helm and kubectl against the API simulator (tests/k8s/apisim.py), whose
# kubelet runs the worker pods as real rowshift-workers:
#   1. the chart with checkpoint.existingClaim: the coordinator Deployment
#      saves the model to /checkpoints/final and both pods mount the claim at
#      /checkpoints (the simulator stores the Deployment; the coordinator runs
#      here as it would, a local directory standing in for the ReadWriteMany
#      volume every pod shares); Ready means joined: before the coordinator
#      starts, the worker pods run but are not Ready (READY 0/1; their
#      readiness probe tests ROWSHIFT_READY_FILE in their emptyDir);
#   2. the job trains its steps, the worker pods Ready (1/1) meanwhile, and
#      ends: the final checkpoint is complete on
#      the volume, and `rowshiftctl checkpoint export` of it is read by the
#      independent safetensors reader; the StatefulSet is scaled to 0 and its
#      pods are gone; `kubectl describe statefulset` lists Started and
#      Completed;
#   3. the coordinator stays up in phase done, serving its status (a
#      Deployment would restart a process that exits); SIGTERM ends it, 0;
#   4. a second coordinator, started beside the first while the job trains,
#      waits for the Lease and does nothing while the job completes
#      undisturbed; once the first ends (SIGTERM gives the Lease back) it
#      takes over, finds the job done and trains nothing, and a worker pod
#      scaled back in is told to stop: the job never trains again. It runs
#      as the chart's ServiceAccount whose Role lost its patch on
#      statefulsets/scale (the simulator enforces RBAC): it cannot scale the
#      workers to 0 and says so in a ScaleFailed Warning event;
#   5. a coordinator started on the job's state with another model config
#      refuses it, naming the section, in a CannotStart Warning event.
set -u
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/apisim.sh"
kubectl=tools/bin/kubectl
ns=rowshift-complete
sts=rowshift-worker
steps=60
sel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker
start_apisim_for $ns

# 1. the chart, with a checkpoint volume
cport=$(free_port)
render_chart $ns $cport --set checkpoint.existingClaim=rowshift-checkpoints
# the workers' readiness probe every second instead of 5 s: the job trains for about 2 s here
sed -i '/"\/run\/rowshift\/ready"\]$/,/periodSeconds:/ s/periodSeconds: 5$/periodSeconds: 1/' "$tmp/chart.yaml"
check "the worker's readiness probe tests its ready file (period made 1 s for this test)" bash -c \
	"grep -A2 'command: \[\"test\", \"-e\", \"/run/rowshift/ready\"\]' '$tmp/chart.yaml' | grep -q 'periodSeconds: 1$'"
check "kubectl apply creates the chart's objects" bash -c "timeout 30 $kubectl apply -f $tmp/chart.yaml >$tmp/apply.out 2>&1"
volumes_ok() { # the Deployment saves to /checkpoints/final; both pod templates mount the claim there
	k get deployment rowshift-coordinator -o json >"$tmp/deploy.json" && k get statefulset $sts -o json >"$tmp/sts.json" &&
		python3 - "$tmp/deploy.json" "$tmp/sts.json" <<'PY'
import json, sys
deploy, sts = (json.load(open(p)) for p in sys.argv[1:3])
args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
assert args[args.index("--save") + 1] == "/checkpoints/final", args
for o in (deploy, sts):
    spec = o["spec"]["template"]["spec"]
    vol = [v["name"] for v in spec["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == "rowshift-checkpoints"]
    assert len(vol) == 1, (o["metadata"]["name"], spec["volumes"])
    mounts = [m for c in spec["containers"] for m in c.get("volumeMounts", []) if m["name"] == vol[0]]
    assert [m["mountPath"] for m in mounts] == ["/checkpoints"], (o["metadata"]["name"], mounts)
PY
}
check "the coordinator saves to /checkpoints/final; both pods mount the claim at /checkpoints" volumes_ok
jointok=$(k get secret rowshift-join-token -o jsonpath='{.data.token}' | base64 -d)
# Ready means joined: READY 0/1 while the workers wait for their coordinator, 1/1 while they train
timeout 120 $kubectl -n $ns get pods -l "$sel" -w --no-headers >"$tmp/pods-watch.out" 2>&1 &
pods_watch=$!
pods_ready() { # pods_ready 0/1|1/1: both worker pods Running with that READY
	[ "$(k get pods -l "$sel" --no-headers 2>/dev/null | awk -v r="$1" '$2 == r && $3 == "Running"' | wc -l)" = 2 ]
}
waiting_unready() { # both workers started and waiting; still not Ready after their probe ran (every second)
	for _ in $(seq 1 80); do
		pods_ready 0/1 && grep -qs . "$tmp/pods/$ns/$sts-0/worker.log" && grep -qs . "$tmp/pods/$ns/$sts-1/worker.log" && break
		sleep 0.25
	done
	sleep 1.1
	pods_ready 0/1 || { k get pods -l "$sel" >&2; return 1; }
}
check "before the coordinator starts, the worker pods run but are not Ready (READY 0/1: not joined)" waiting_unready
mkdir -p "$tmp/vol"
coordinator() { # [KUBECONFIG]: as the Deployment runs it, /checkpoints being $tmp/vol
	ROWSHIFT_JOIN_TOKEN=$jointok "$bin/rowshift-coordinator" --kubernetes --kubeconfig "${1:-$tmp/kubeconfig}" \
		--namespace $ns --statefulset $sts --selector "$sel" --state-configmap rowshift-state \
		--config examples/dlrm-small.json --listen 127.0.0.1:$cport --steps $steps --debounce-ms 3000 \
		--save "$tmp/vol/final" >>"$tmp/coord.out" 2>>"$tmp/coord.err" &
	coord=$!
}
coordinator
check "the coordinator holds the Lease and acts" wait_for "$tmp/coord.err" "acting coordinator, term 1" 30
ROWSHIFT_POD_NAME=coordinator-2 ROWSHIFT_JOIN_TOKEN=$jointok "$bin/rowshift-coordinator" --kubernetes \
	--kubeconfig "$tmp/sa.kubeconfig" --namespace $ns --statefulset $sts --selector "$sel" \
	--state-configmap rowshift-state --config examples/dlrm-small.json --listen 127.0.0.1:$cport --steps $steps \
	--debounce-ms 3000 --save "$tmp/vol/final" >"$tmp/coord2.out" 2>"$tmp/coord2.err" &
coord2=$!
check "a second coordinator started beside it waits for the Lease" wait_for "$tmp/coord2.err" "is held by" 20

# 2. it trains to the end
check "the job trains its $steps steps and ends" wait_for "$tmp/coord.out" "^training done: 2 workers, $steps steps" 90
check "... undisturbed by the second coordinator, which never acted" bash -c \
	"kill -0 $coord2 && ! grep -q 'acting coordinator' '$tmp/coord2.err' && [ ! -s '$tmp/coord2.out' ]"
trained_ready() { # each worker pod was seen Ready (1/1) while it held the job's model
	local p
	for p in $sts-0 $sts-1; do
		grep -Eq "^$p +1/1 +Running " "$tmp/pods-watch.out" || { cat "$tmp/pods-watch.out" >&2; return 1; }
	done
}
check "while the job trained, both worker pods were Ready (READY 1/1: joined)" trained_ready
check "the final checkpoint is complete on the volume, of step $steps" bash -c \
	"python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))[\"step\"] == $steps' '$tmp/vol/final/index.json'"
"$bin/rowshiftctl" checkpoint export "$tmp/vol/final" "$tmp/model.safetensors" >"$tmp/export.out" 2>&1
check "its export is read by the independent safetensors reader, every table's weight of its shape" \
	python3 - "$tmp/vol/final" "$tmp/model.safetensors" <<'PY'
import json, os, sys
sys.path.insert(0, "tests/integration")
import safetensors_check as stc
ix = json.load(open(os.path.join(sys.argv[1], "index.json")))
hdr, _ = stc.load(sys.argv[2])
for tb in ix["tables"]:
    t = hdr[f"embedding_bags.{tb['name']}.weight"]
    assert t["shape"] == [tb["rows"], tb["dim"]], (tb["name"], t["shape"])
assert hdr["__metadata__"]["step"] == str(ix["step"])
PY
scaled_to_0() { # the StatefulSet wants 0 pods, and none is left
	for _ in $(seq 1 120); do
		[ "$(k get statefulset $sts -o jsonpath='{.spec.replicas}')" = 0 ] &&
			[ -z "$(k get pods -l "$sel" -o jsonpath='{.items[*].metadata.name}')" ] && return 0
		sleep 0.25
	done
	k get statefulset $sts -o jsonpath='{.spec.replicas}' >&2
	k get pods -l "$sel" >&2
	return 1
}
check "the coordinator scaled the StatefulSet to 0 and its pods are gone" scaled_to_0
kill $pods_watch 2>/dev/null
described() { k describe statefulset $sts >"$tmp/describe.txt" && grep -q "Started .*Generation 1: 2 workers" "$tmp/describe.txt" &&
	grep -q "Completed .*Trained to step $steps" "$tmp/describe.txt"; }
check "kubectl describe statefulset lists the job's Started and Completed events" described

# 3. it stays up, done
up_and_done() { # still running a second on, and its status stream says done
	local phase
	sleep 1
	kill -0 $coord || return 1
	phase=$(timeout 20 "$bin/rowshiftctl" status --json --coordinator ws://127.0.0.1:$cport |
		python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["phase"])')
	[ "$phase" = done ] || { echo "phase: $phase" >&2; return 1; }
}
check "the coordinator stays up in phase done, serving its status" up_and_done
check "kubectl get lease -L rowshift.io/phase,... shows the job done at generation 1, step $steps" \
	lease_shows rowshift-worker-leader rowshift.io/phase,rowshift.io/generation,rowshift.io/step " done +1 +$steps\$"
check "... and ready (/readyz 200: serving the status is its job now)" bash -c \
	"[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$cport/readyz)\" = 200 ]"
no_warnings() { # the events after a clean end: no WorkerLost, no Failed
	k describe statefulset $sts >"$tmp/describe2.txt" && grep -q Completed "$tmp/describe2.txt" || { tail -12 "$tmp/describe2.txt" >&2; return 1; }
	! grep -E 'Warning +(WorkerLost|Failed) ' "$tmp/describe2.txt" >&2
}
check "the workers that finished and were scaled away are no WorkerLost warnings" no_warnings
# 4. never again: the second coordinator takes over, as the ServiceAccount, without the right to scale
lines=$(grep -c "^step" "$tmp/coord.out")
k get role rowshift-coordinator -o json | python3 -c '
import json, sys
r = json.load(sys.stdin)
r["rules"] = [x for x in r["rules"] if "statefulsets/scale" not in x.get("resources", [])]
print(json.dumps(r))' >"$tmp/role.json"
check "the Role loses its patch on statefulsets/scale" bash -c "timeout 30 $kubectl -n $ns replace -f '$tmp/role.json' >/dev/null"
kill -TERM $coord
wait_pid $coord 60
rc=$?
check "SIGTERM ends the first coordinator, exit 0, the Lease given back (exit $rc)" bash -c \
	"[ $rc = 0 ] && grep -q 'lease rowshift-worker-leader: given back' '$tmp/coord.err'"
coord=$coord2
check "the second takes the Lease over at once and finds the job done" \
	wait_for "$tmp/coord2.err" "in phase done: the job is over" 30
scale_failed() { # a Warning event on the StatefulSet, once, naming the refusal and the way out
	for _ in $(seq 1 60); do
		k describe statefulset $sts >"$tmp/describe3.txt" && grep -q "Warning  *ScaleFailed" "$tmp/describe3.txt" &&
			grep -q "kubectl scale statefulset/$sts --replicas=0" "$tmp/describe3.txt" && return 0
		sleep 0.25
	done
	tail -8 "$tmp/describe3.txt" >&2
	return 1
}
check "refused the scale to 0 (403), it says so: a ScaleFailed Warning on the StatefulSet" scale_failed
wlog=$tmp/pods/$ns/$sts-0/worker.log
joins=$(grep -c "$sts-0 joined" "$tmp/coord2.err")
stops=$(grep -c "stopped by the coordinator" "$wlog" 2>/dev/null)
k scale statefulset/$sts --replicas=1 >/dev/null
told_to_stop() { # the new pod's worker joined this coordinator and was told to stop
	for _ in $(seq 1 120); do
		[ "$(grep -c "$sts-0 joined" "$tmp/coord2.err")" -gt "$joins" ] &&
			[ "$(grep -c "stopped by the coordinator" "$wlog" 2>/dev/null)" -gt "${stops:-0}" ] && return 0
		sleep 0.25
	done
	tail -5 "$wlog" >&2
	return 1
}
check "a worker pod scaled back in is told to stop" told_to_stop
check "and the job does not train again" bash -c "sleep 2; [ \$(grep -c '^step' '$tmp/coord.out') = $lines ] &&
	! grep -q '^step\|generation 2\|^training done' '$tmp/coord2.out'"
# 5. a coordinator started on the job's state with another model config (the same tables, another seed) refuses
# the state, naming the section, and says so in a Warning event: a changed model is a new job
kill -TERM $coord
wait_pid $coord 60
rc=$?
check "5. (SIGTERM ends the second coordinator, exit $rc, the Lease given back)" bash -c \
	"[ $rc = 0 ] && grep -q 'lease rowshift-worker-leader: given back' '$tmp/coord2.err'"
coord=
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.setdefault("train", {})["seed"] = 7
json.dump(c, open(sys.argv[2], "w"))' examples/dlrm-small.json "$tmp/reseeded.json"
ROWSHIFT_JOIN_TOKEN=$jointok timeout 60 "$bin/rowshift-coordinator" --kubernetes --kubeconfig "$tmp/kubeconfig" \
	--namespace $ns --statefulset $sts --selector "$sel" --state-configmap rowshift-state --config "$tmp/reseeded.json" \
	--listen 127.0.0.1:$cport --steps $steps >"$tmp/coord3.out" 2>"$tmp/coord3.err"
rc=$?
check "5. a coordinator with another model config refuses the job's state (exit $rc), naming the section" bash -c \
	"[ $rc = 1 ] && grep -q 'the job was started with another model config (it differs from .* in train)' '$tmp/coord3.err'"
cannot_start() {
	k get events --field-selector involvedObject.name=$sts,reason=CannotStart -o jsonpath='{.items[*].message}' |
		grep -q 'another model config'
}
check "5. ... in a CannotStart Warning event on the StatefulSet" cannot_start
# the state of a big job fits: 2,000 tables on 1,024 workers mid-reshard (tests/unit/test_state.c makes it)
RS_BIG_STATE_OUT=$tmp/big-state.json "$BUILD/tests/unit/test_state" >/dev/null 2>&1
big_state_fits() {
	local n
	n=$(stat -c %s "$tmp/big-state.json") || return 1
	k create configmap big-state --from-file=state.json="$tmp/big-state.json" >/dev/null &&
		k get configmap big-state -o jsonpath='{.data.state\.json}' >"$tmp/big-state.back" &&
		cmp -s "$tmp/big-state.json" "$tmp/big-state.back" && echo "the state is $n bytes" && [ "$n" -lt 1048576 ]
}
check "the state of 2,000 tables on 1,024 workers in mid-reshard is stored under the simulator's 1 MiB limit, read back whole" \
	big_state_fits
kill -TERM $sim_pid
wait_pid $sim_pid 20
check "the simulator stops and leaves no worker process behind" bash -c "! pgrep -f '[r]owshift-worker .*$tmp/pods' >/dev/null"
[ "$fails" = 0 ] || { tail -20 "$tmp/coord.out"; tail -30 "$tmp/coord.err"; tail -10 "$tmp/coord3.err"; tail -20 "$tmp/sim.err"; }
finish_checks k8s_complete
