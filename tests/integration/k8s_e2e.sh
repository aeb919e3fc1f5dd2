#!/bin/bash
# k8s_e2e.sh - rowshift on Kubernetes, end to end, with the real helm and
# kubectl against the API simulator (tests/k8s/apisim.py, TLS and a bearer
# token), whose kubelet runs each worker pod as a real rowshift-worker:
#   1. the chart rendered by `helm template` is created with `kubectl apply`;
#      the coordinator (--kubernetes, run here against the simulator's
#      kubeconfig, TLS verified) trains with the 2 worker pods;
#   2. `kubectl scale --replicas=4`, then 3: one reshard each, resumed at the
#      step it paused at, every table's checksum equal across it, and
#      `kubectl get pods` agrees with the coordinator's members; each reshard
#      is an Event on the StatefulSet;
#   3. the coordinator is SIGKILLed and started again: it recovers the job
#      from its state ConfigMap and training carries on past where it was;
#   3b. an eviction of a worker pod through the eviction API (what `kubectl
#      drain` does per pod; the chart's PDB, maxUnavailable: 1): a graceful
#      leave (SIGTERM, rows handed over, one reshard 3 -> 2, no recovery);
#      while its replacement (same name) is not yet Ready, an eviction of
#      another worker is refused (429, the PDB's message); the replacement
#      rejoins (2 -> 3) and the PDB allows 1 disruption again;
#   4. the simulator drops every watch and refuses new ones for 3 s, during
#      which the StatefulSet is scaled and the history forgotten (the next
#      watch gets 410 Expired): the coordinator lists again and reshards for
#      the change;
#   5. the API server is unreachable for 6 s: training goes on with the
#      same members, and a scale made after it is acted on;
#   6. `kubectl delete pod --grace-period=0 --force` of a worker (its
#      process SIGKILLed, the StatefulSet makes a new pod) while the
#      coordinator's pod watch is held: the world rolls back to the latest
#      periodic checkpoint and trains again with the new pod, a Warning
#      Event on the StatefulSet saying so; the deletion, seen only on a
#      relist after the new pod's worker joined (workers join with their
#      pod's uid), is not taken for the new worker's end.
# The coordinator runs with --sharding-group 2: 4 workers train in 2 replica
# groups of 2 (2 and 3 train 1D), and a worker pod force-deleted there (in
# 2.) heals from its replica, no rollback.
set -u
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/apisim.sh"
kubectl=tools/bin/kubectl
helm=tools/bin/helm
model=$tmp/light.json # a lighter dlrm-small: the job trains until stopped
light_config examples/dlrm-small.json "$model"
ns=rowshift-e2e
sts=rowshift-worker
sel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker
start_apisim
k() { timeout 30 $kubectl -n $ns "$@"; }
sim() { curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $simtok" -X POST \
	"https://127.0.0.1:$simport/_sim/$1"; }

# 1. install: helm template | kubectl apply; the coordinator runs here
cport=$(free_port)
printf '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "%s"}}\n' $ns | timeout 30 $kubectl apply -f - >/dev/null
$helm template rowshift helm/rowshift --namespace $ns --set workers=2 --set gpusPerWorker=0 \
	--set coordinatorURL=ws://127.0.0.1:$cport --set terminationGracePeriodSeconds=60 \
	--set coordinatorGraceMs=60000 --set-file modelJson=$model >"$tmp/chart.yaml"
check "kubectl apply creates the chart's objects" bash -c "timeout 30 $kubectl apply -f $tmp/chart.yaml >$tmp/apply.out 2>&1"
pods() { # the worker pods not being deleted, sorted, one line
	k get pods -l "$sel" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.phase}{" "}{.metadata.deletionTimestamp}{"\n"}{end}' |
		awk '$2 == "Running" && NF == 2 { print $1 }' | sort | tr '\n' ' '
}
all_pods() { k get pods -l "$sel" -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | tr '\n' ' '; }
until_pods() { # until_pods "NAMES " SECONDS: every pod is one of NAMES, running, none other left
	for _ in $(seq 1 $(($2 * 4))); do
		[ "$(pods)" = "$1" ] && [ "$(all_pods)" = "$1" ] && return 0
		sleep 0.25
	done
	echo "pods: $(all_pods) (running: $(pods)), wanted $1" >&2
	return 1
}
jointok=$(k get secret rowshift-join-token -o jsonpath='{.data.token}' | base64 -d)
check "the join token the chart generated is in its Secret" test ${#jointok} -ge 32
check "a join token under 32 characters is refused (a captured proof would allow guessing it offline)" bash -c \
	"ROWSHIFT_JOIN_TOKEN=0123456789abcdef0123456789abcde timeout 10 '$bin/rowshift-coordinator' --kubernetes \
	 --config $model --statefulset $sts 2>&1 | grep -q 'ROWSHIFT_JOIN_TOKEN is too short'"

bail() { # the rest cannot pass: say why and stop
	echo "stopping: $1"; tail -20 "$tmp/coord.err" "$tmp/sim.err" 2>/dev/null; finish_checks k8s_e2e; exit 1
}
coordinator() { # start the coordinator as the chart's Deployment would, but here
	ROWSHIFT_JOIN_TOKEN=$jointok "$bin/rowshift-coordinator" --kubernetes --kubeconfig "$tmp/kubeconfig" \
		--namespace $ns --statefulset $sts --selector "$sel" --state-configmap rowshift-state \
		--config $model --listen 127.0.0.1:$cport --steps 1000000 --debounce-ms 3000 \
		--checkpoint-dir "$tmp/ck" --checkpoint-every 200 --sharding-group 2 \
		>>"$tmp/coord.out" 2>>"$tmp/coord.err" &
	coord=$!
}
coordinator
check "the worker pods are Running" until_pods "$sts-0 $sts-1 " 60
check "the coordinator trains with the 2 worker pods" wait_for "$tmp/coord.out" "^step" 60
[ "$fails" = 0 ] || bail "the job did not start"

members() { # the coordinator's world, from its status stream: sorted names, one line
	timeout 20 "$bin/rowshiftctl" status --json --coordinator ws://127.0.0.1:$cport | python3 -c '
import json, sys
snap = json.loads(sys.stdin.readline())
print(" ".join(sorted(m["name"] for m in snap["members"] if m["rank"] is not None and not m["gone"])) + " ")'
}
members_are() { local got; got=$(members); [ -n "$1" ] && [ "$got" = "$1" ] || { echo "members: $got, wanted $1" >&2; return 1; }; }
check "the coordinator's members are the pods" members_are "$(pods)"

# 2. kubectl scale 2 -> 4 -> 3
reshard() { # reshard GEN FROM TO: the coordinator reshards once, resumes at the step it paused at, checksums equal
	local gen=$1 from=$2 to=$3 at resumed
	wait_for "$tmp/coord.out" "generation $gen resumed at step" 90 || { echo "no generation $gen" >&2; return 1; }
	grep -q "generation $gen: $from -> $to workers[a-z0-9 ]* at step" "$tmp/coord.out" || { grep "generation $gen:" "$tmp/coord.out" >&2; return 1; }
	at=$(sed -n "s/^generation $gen: $from -> $to workers[a-z0-9 ]* at step \([0-9]*\).*/\1/p" "$tmp/coord.out")
	resumed=$(sed -n "s/^generation $gen resumed at step \([0-9]*\).*/\1/p" "$tmp/coord.out")
	[ -n "$at" ] && [ "$at" = "$resumed" ] || { echo "paused at '$at', resumed at '$resumed'" >&2; return 1; }
	grep -q "generation $gen: staged and verified.*every table's checksum matches" "$tmp/coord.out"
}
k scale statefulset/$sts --replicas=4 >/dev/null
check "kubectl scale --replicas=4: one reshard 2 -> 4, resumed at the same step, checksums equal" reshard 2 2 4
check "kubectl get pods shows the 4 workers" until_pods "$sts-0 $sts-1 $sts-2 $sts-3 " 30
check "the coordinator's members are the 4 pods" members_are "$sts-0 $sts-1 $sts-2 $sts-3 "
check "4 workers train in 2 replica groups of 2" grep -q "^generation 2: 2 -> 4 workers in 2 replica groups of 2 at" "$tmp/coord.out"
# a worker pod force-deleted in a 2 x 2 world: rebuilt from its replica, no rollback, no checkpoint read
k delete pod $sts-1 --grace-period=0 --force >/dev/null 2>&1
check "kubectl delete pod --force with R = 2: rebuilt from its replica, no rollback" \
	wait_for "$tmp/coord.out" "^recovery: $sts-1 .*; rebuilding its rows from their replicas, no rollback" 60
check "the new pod gets its rows and the world trains on" \
	wait_for "$tmp/coord.out" "^recovered: generation 3 (4 workers) made step .*(healed from replicas" 90
check "no rollback" bash -c "! grep -q 'rolling back' $tmp/coord.out"
check "the coordinator's members are the 4 pods again" members_are "$sts-0 $sts-1 $sts-2 $sts-3 "

k scale statefulset/$sts --replicas=3 >/dev/null
check "kubectl scale --replicas=3: one reshard 4 -> 3, resumed at the same step, checksums equal" reshard 4 4 3
check "the deleted pod drained and is gone; kubectl get pods shows 3 workers" until_pods "$sts-0 $sts-1 $sts-2 " 60
drained_clean() { # the kubelet's record of the deleted pod: SIGTERM only, exit 0
	curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $simtok" \
		"https://127.0.0.1:$simport/_sim/pods" | python3 -c '
import json, sys
recs = [r for r in json.load(sys.stdin) if r["name"] == sys.argv[1]]
assert len(recs) == 1 and recs[0]["signals"] == ["SIGTERM"] and recs[0]["exit_codes"] == [0], recs
' $sts-3 && grep -q 'handed my rows over in generation 4; leaving' "$tmp/pods/$ns/$sts-3/worker.log"
}
check "its worker got SIGTERM, handed its rows over and exited 0 within the grace period" drained_clean
check "the coordinator's members are the 3 pods" members_are "$sts-0 $sts-1 $sts-2 "
events() { k get events --field-selector "involvedObject.name=$sts,reason=Resharded" \
	-o jsonpath='{range .items[*]}{.message}{"\n"}{end}'; }
events_ok() {
	events >"$tmp/events.txt" && grep -q '^Resharded generation 2: 2 -> 4 workers' "$tmp/events.txt" &&
		grep -q '^Resharded generation 4: 4 -> 3 workers' "$tmp/events.txt"
}
check "each reshard is an Event on the StatefulSet" events_ok

# 3. the coordinator dies and comes back
last_step() { sed -n 's/^step *\([0-9]*\).*/\1/p' "$tmp/coord.out" | tail -1; }
before=$(last_step)
{ kill -9 $coord && wait $coord; } 2>/dev/null  # (quiet: bash reports a job killed by a signal)
check "the state ConfigMap holds generation 4" bash -c \
	"timeout 30 $kubectl -n $ns get configmap rowshift-state -o jsonpath='{.data.state\\.json}' | grep -q '\"generation\":4'"
coordinator
check "the state ConfigMap does not hold the join token (the Secret does)" bash -c \
	"j=\$(timeout 30 $kubectl -n $ns get configmap rowshift-state -o json) && echo \"\$j\" | grep -q generation &&
	 ! echo \"\$j\" | grep -qF -- '$jointok'"
check "the restarted coordinator recovers the job from the ConfigMap" wait_for "$tmp/coord.err" "recovered generation 4" 30
check "training carries on past step $before with the same 3 workers" bash -c \
	"for _ in \$(seq 1 240); do s=\$(sed -n 's/^step *\([0-9]*\).*/\1/p' $tmp/coord.out | tail -1); \
	 [ \"\${s:-0}\" -gt $before ] && exit 0; sleep 0.25; done; exit 1"
check "the coordinator's members are still the 3 pods" members_are "$sts-0 $sts-1 $sts-2 "

# 3b. an eviction (what kubectl drain does per pod: the eviction API, which honours the chart's PDB,
# maxUnavailable: 1) is a graceful leave; a second one is refused while the replacement is joining
until_true() { for _ in $(seq 1 $(($1 * 4))); do "${@:2}" 2>/dev/null && return 0; sleep 0.25; done; "${@:2}"; }
pdb_allows() { [ "$(k get pdb $sts -o jsonpath='{.status.disruptionsAllowed}/{.status.currentHealthy}')" = "$1" ]; }
evict() { # evict POD: POST its policy/v1 Eviction as kubectl drain does; kubectl's output
	printf '{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "%s", "namespace": "%s"}}\n' $1 $ns \
		>"$tmp/eviction.json"
	k create --raw /api/v1/namespaces/$ns/pods/$1/eviction -f "$tmp/eviction.json" 2>&1
}
check "the PDB allows 1 disruption with the 3 workers joined (Ready)" until_true 20 pdb_allows 1/3
uid2=$(k get pod $sts-2 -o jsonpath='{.metadata.uid}')
lines=$(wc -l <"$tmp/coord.out")
sim "hold-starts?seconds=120" >/dev/null
evict $sts-2 >"$tmp/evict-2.out"
check "the eviction of $sts-2 is granted (201 Success)" grep -q '"status":"Success"' "$tmp/evict-2.out"
check "the evicted worker leaves gracefully: one reshard 3 -> 2, resumed at the same step, checksums equal" reshard 5 3 2
# The replacement's containers are held from before the eviction until the second one was tried, as while its
# image pulls, so that it cannot join and turn Ready meanwhile (its readiness file comes with its rows)
evicted_clean() { # SIGTERM only, exit 0, its rows handed over; the coordinator neither recovered nor rolled back
	curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $simtok" \
		"https://127.0.0.1:$simport/_sim/pods" | python3 -c '
import json, sys
recs = [r for r in json.load(sys.stdin) if r["uid"] == sys.argv[1]]
assert len(recs) == 1 and recs[0]["signals"] == ["SIGTERM"] and recs[0]["exit_codes"] == [0], recs
' $uid2 && grep -rq 'handed my rows over in generation 5; leaving' "$tmp/pods/$ns/$sts-2/" &&
		! tail -n +$((lines + 1)) "$tmp/coord.out" | grep -q '^recovery:\|rolling back'
}
check "its worker got SIGTERM, handed its rows over and exited 0: no recovery, no rollback" until_true 20 evicted_clean
replacement_unready() { # the StatefulSet's new $sts-2 exists and is not Ready (not joined)
	local u r
	u=$(k get pod $sts-2 -o jsonpath='{.metadata.uid}') && [ -n "$u" ] && [ "$u" != "$uid2" ] || return 1
	r=$(k get pod $sts-2 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') && [ "$r" != True ]
}
joining() { replacement_unready && pdb_allows 0/2; }
check "the StatefulSet makes $sts-2 again: not Ready (its start held, as while its image pulls), and the PDB allows 0" until_true 20 joining
evict $sts-0 >"$tmp/evict-0.out"
check "then an eviction of $sts-0 is refused: 429, the PDB's message" grep -qxF \
	"Error from server (TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget." "$tmp/evict-0.out"
check "... while the replacement was not yet Ready (its probe had not seen it joined)" replacement_unready
check "... and $sts-0 is not being deleted" test -z "$(k get pod $sts-0 -o jsonpath='{.metadata.deletionTimestamp}')"
sim "hold-starts?seconds=0" >/dev/null
check "the replacement rejoins: one reshard 2 -> 3" reshard 6 2 3
check "once it is Ready the PDB allows 1 disruption again" until_true 20 pdb_allows 1/3
check "the coordinator's members are the 3 pods" members_are "$sts-0 $sts-1 $sts-2 "

# 4. watches dropped and history gone: the coordinator lists again and misses nothing
# (watches are dropped and refused for 3 s; the scale and the compaction happen in that window, so the
# coordinator comes back with a resourceVersion the simulator has forgotten)
sim "hold-watches?seconds=3" >"$tmp/dropped.json"
k scale statefulset/$sts --replicas=4 >/dev/null
sim compact >/dev/null
check "the simulator dropped the coordinator's watch" grep -q '"dropped": *[1-9]' "$tmp/dropped.json"
check "the coordinator was told 410 and listed again" wait_for "$tmp/coord.err" "listing again" 30
check "the scale made meanwhile is seen: one reshard 3 -> 4" reshard 7 3 4
check "kubectl get pods shows the 4 workers again" until_pods "$sts-0 $sts-1 $sts-2 $sts-3 " 30
check "the coordinator's members are the 4 pods" members_are "$sts-0 $sts-1 $sts-2 $sts-3 "

# 5. the API server unreachable for 6 s
before=$(last_step)
errs=$(wc -l <"$tmp/coord.err")
sim "unreachable?seconds=6" >/dev/null
sleep 6.5
check "the coordinator noticed the API was gone" bash -c \
	"tail -n +$((errs + 1)) '$tmp/coord.err' | grep -q 'kubernetes: .*trying again in'"
check "it kept training with the same members meanwhile" bash -c \
	"[ \$(sed -n 's/^step *\([0-9]*\).*/\1/p' $tmp/coord.out | tail -1) -gt $before ] && ! grep -q '^generation 8' $tmp/coord.out"
# 5b. a state write is done but its answer is lost (the connection cut first): the coordinator's next write on the
# version before it conflicts, and it must tell its own landed write from a successor's, not stop acting
sim "lose-answers?resource=configmaps&count=1" >/dev/null
k scale statefulset/$sts --replicas=3 >/dev/null
check "after it, a scale is acted on: one reshard 4 -> 3" reshard 8 4 3
answers_lost() { curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $simtok" \
	"https://127.0.0.1:$simport/_sim/healthz" | grep -q '"answersLost": *1\b'; }
check "(the simulator lost a state write's answer)" answers_lost
check "the coordinator found its own write there, and went on acting" bash -c \
	"grep -q 'a state write landed though its answer was lost' '$tmp/coord.err' &&
	 ! grep -q 'another coordinator took the job over' '$tmp/coord.err'"
# 6. a worker pod force-deleted: no grace, its rows gone with it; the coordinator's pod watch is held from before
# until the replacement pod's worker joined (as after an API outage), and the history forgotten, so that the
# coordinator learns of the deletion only from a relist that shows the new pod under the old name
wait_for "$tmp/coord.out" "checkpoint of step [0-9]* complete" 120
recoveries=$(grep -c "^recovery: " "$tmp/coord.out")
errs=$(wc -l <"$tmp/coord.err")
said_since() { # said_since LINE PATTERN SECONDS: the coordinator's log after LINE matches PATTERN (bounded)
	for _ in $(seq 1 $(($3 * 20))); do tail -n +$(($1 + 1)) "$tmp/coord.err" | grep -q "$2" && return 0; nap 0.05; done
	return 1
}
sim "hold-watches?seconds=120" >/dev/null
k delete pod $sts-1 --grace-period=0 --force >/dev/null 2>&1
check "kubectl delete pod --force: the world rolls back to the latest checkpoint, naming the pod" \
	wait_for "$tmp/coord.out" "^recovery: $sts-1 .*; rolling back to $tmp/ck/step-[0-9]* (step [0-9]*)" 60
check "the new pod's worker joins while the coordinator cannot watch pods" said_since $errs "$sts-1 joined (transport" 60
sim compact >/dev/null
sim "hold-watches?seconds=0" >/dev/null
check "the world of 3 trains again" wait_for "$tmp/coord.out" "^recovered: generation [0-9]* (3 workers) made step" 90
check "the relist's new pod under the old name is the earlier pod's end, not the new worker's" bash -c \
	"$(declare -f said_since); tmp='$tmp'; said_since $errs '$sts-1 (an earlier pod of that name): pod replaced by a new one' 30 &&
	 sleep 1 && [ \$(grep -c '^recovery: ' '$tmp/coord.out') = $((recoveries + 1)) ]"
check "the coordinator's members are the 3 pods" members_are "$sts-0 $sts-1 $sts-2 "
check "the recovery is a Warning Event on the StatefulSet" bash -c "timeout 30 $kubectl -n $ns get events \
	--field-selector involvedObject.name=$sts,reason=Recovering -o jsonpath='{.items[*].type}' | grep -q Warning"
check "the earlier pod's end is a WorkerLost Warning Event on the StatefulSet (posted from the pod watch's news)" bash -c \
	"timeout 30 $kubectl -n $ns get events --field-selector involvedObject.name=$sts,reason=WorkerLost \
	-o jsonpath='{.items[*].message}' | grep -qF '$sts-1 (an earlier pod of that name)'"
check "no worker failed, the job did not fail" bash -c "! grep -q 'job failed\|exited with status [1-9]' $tmp/coord.err $tmp/coord.out"

kill -TERM $coord
wait_pid $coord 60
rc=$?
check "the coordinator, interrupted, exits 0 and leaves the workers for the next one (exit $rc)" \
	bash -c "[ $rc = 0 ] && grep -q 'interrupted: the workers carry on' $tmp/coord.err"
kill -TERM $sim_pid
wait_pid $sim_pid 20
check "the simulator stops and leaves no worker process behind" \
	bash -c "! pgrep -f '[r]owshift-worker .*$tmp/pods' >/dev/null && ! pgrep -f '[r]owshift-worker' -P $sim_pid >/dev/null"
[ "$fails" = 0 ] || { tail -30 "$tmp/coord.out"; tail -40 "$tmp/coord.err"; tail -20 "$tmp/sim.err"; }
finish_checks k8s_e2e
