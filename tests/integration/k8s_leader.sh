#!/bin/bash
# k8s_leader.sh - at most one acting coordinator: a coordination.k8s.io
# Lease, state writes fenced on the version each coordinator last wrote,
# and terms the workers check. The real kubectl and helm against the API
# simulator (tests/k8s/apisim.py), whose kubelet runs the worker pods; every
# coordinator runs as the chart's ServiceAccount, so its Role must be enough:
#   1. coordinator A acts (term 1) and the workers train; B, started beside
#      it (a replacement while the old pod still runs), waits for the Lease:
#      it writes nothing and does not listen while A renews it; A's pod
#      watch goes silent without a word (a NAT forgot it): A notices within
#      its idle timeout, watches again and sees the worker scaled in meanwhile;
#   2. A is frozen (SIGSTOP) past its Lease: B takes over and claims the
#      state (term 2), then cannot listen (A, frozen, holds the port; pods
#      of a real cluster have addresses of their own) and gives the Lease
#      back; A, thawed, stops at once (exit 3) without a word or a write;
#   3. C takes the Lease at once (given back), acts with term 3, and the
#      workers rejoin it on the same address; training goes on;
#   4. C is cut off from the API (a proxy stands in for a partition): it
#      stops acting by itself (exit 3) before D, waiting, may take over; D
#      acts with term 4 and the workers rejoin it; D gets its token from an
#      exec credential plugin, as a coordinator run from a laptop against
#      EKS or GKE would;
#   5. SIGTERM ends D (exit 0) and gives the Lease back (no holder).
set -u
. "$(dirname "$0")/../lib/itest.sh"
light=$tmp/light.json # a lighter dlrm-small: these jobs train until stopped
light_config examples/dlrm-small.json "$light"
. "$(dirname "$0")/../lib/apisim.sh"
kubectl=tools/bin/kubectl
ns=rowshift-leader
sts=rowshift-worker
lease=rowshift-worker-leader
duration=6 # the Lease's seconds (30 by default): A must give up within 4, B waits at least 6
sel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker
start_apisim_for $ns

cport=$(free_port)
render_chart $ns $cport --set-file modelJson="$light" # the workers' model: the same as the coordinators'
check "kubectl apply creates the chart's objects" bash -c "timeout 30 $kubectl apply -f $tmp/chart.yaml >$tmp/apply.out 2>&1"
jointok=$(k get secret rowshift-join-token -o jsonpath='{.data.token}' | base64 -d)
python3 tests/integration/cutproxy.py "$tmp/proxy.port" "$simport" "$tmp/cut" "$tmp/hold" 2>"$tmp/proxy.err" &
wait_for "$tmp/proxy.port" . 10 || { echo "the proxy did not start"; exit 1; }
sed "s#127.0.0.1:$simport#127.0.0.1:$(cat "$tmp/proxy.port")#" "$tmp/sa.kubeconfig" >"$tmp/a.kubeconfig"
coordinator() { # NAME KUBECONFIG: as the Deployment runs it, as its ServiceAccount
	ROWSHIFT_POD_NAME=$1 ROWSHIFT_LEASE_DURATION_S=$duration ROWSHIFT_KUBE_WATCH_IDLE_S=4 ROWSHIFT_JOIN_TOKEN=$jointok \
		"$bin/rowshift-coordinator" --kubernetes --kubeconfig "$2" --namespace $ns --statefulset $sts \
		--selector "$sel" --state-configmap rowshift-state --lease $lease --config "$light" \
		--listen 127.0.0.1:$cport --steps 100000000 --debounce-ms 1000 >"$tmp/$1.out" 2>"$tmp/$1.err" &
}
term() { k get configmap rowshift-state -o jsonpath='{.data.state\.json}' |
	python3 -c 'import json, sys; print(json.load(sys.stdin).get("term", 0))'; }
steps_of() { grep -c '^step' "$tmp/$1.out"; }
wait_term() { for _ in $(seq 1 40); do [ "$(term)" = "$1" ] && return 0; sleep 0.25; done; return 1; }

# 1. A acts; B waits
coordinator coord-a "$tmp/a.kubeconfig"
a=$!
check "A holds the Lease and acts, term 1" wait_for "$tmp/coord-a.err" "acting coordinator, term 1" 30
check "the workers train with A" wait_for "$tmp/coord-a.out" "^step" 60
coordinator coord-b "$tmp/sa.kubeconfig"
b=$!
check "B waits for the Lease A holds" wait_for "$tmp/coord-b.err" "lease $lease is held by coord-a: waiting" 20
waiting_since=$(date +%s)
silent_before=$(grep -c "the pod watch said nothing" "$tmp/coord-a.err")
touch "$tmp/hold" # A's open connections (its pod watch) go silent: the simulator's bookmarks are lost too
k scale statefulset/$sts --replicas=3 >/dev/null
resumed() { # a new "said nothing" line, after the hold
	for _ in $(seq 1 120); do
		[ "$(grep -c "the pod watch said nothing for 4 s" "$tmp/coord-a.err")" -gt "$silent_before" ] && return 0
		sleep 0.25
	done
	return 1
}
check "A's pod watch went silent: A notices within its idle timeout (4 s) and watches again" resumed
check "... and sees the worker scaled in meanwhile: a reshard 2 -> 3" \
	wait_for "$tmp/coord-a.err" "membership change: 2 -> 3 workers" 30
while [ $(($(date +%s) - waiting_since)) -le $((duration + 2)) ]; do sleep 0.2; done
b_waited() { kill -0 $a && kill -0 $b && ! grep -q 'acting coordinator' "$tmp/coord-b.err" && [ "$(term)" = 1 ]; }
check "B waited for longer than the Lease lasts, while A renews it: it never acted, the state is A's (term 1)" b_waited
check "A's lease is renewed as its ServiceAccount (its Role grants it)" bash -c \
	"[ \"\$(timeout 30 $kubectl -n $ns get lease $lease -o jsonpath='{.spec.holderIdentity}')\" = coord-a ]"

# 2. A frozen past its Lease
kill -STOP $a
check "A frozen, B takes the Lease over and claims the state, term 2" \
	wait_for "$tmp/coord-b.err" "acting coordinator, term 2" 30
check "the state says term 2" wait_term 2
wait_pid $b 30
rc=$?
check "B cannot listen on A's port (exit $rc) and gives the Lease back" bash -c \
	"[ $rc != 0 ] && grep -q 'cannot listen' '$tmp/coord-b.err' && grep -q 'lease $lease: given back' '$tmp/coord-b.err'"
kill -CONT $a
wait_pid $a 30
rc=$?
# thawed, A finds its Lease expired at its next tick, or (frozen inside a write) that write refused: the
# state's (fenced) or the Lease's (B wrote it meanwhile, and gave it back), or timed out (frozen inside the
# Lease's renewal, on a loaded machine), past its deadline: either way it stops there
check "A, thawed, stops at once: exit 3, its Lease expired or its write refused" bash -c "[ $rc = 3 ] &&
	grep -E -q 'not renewed for [0-9.]+ s \\((past 2/3 of its duration|kubernetes: PUT [^ ]*/leases/$lease: )|configmap rowshift-state was written by someone else|lease $lease: (now held by|written by another coordinator)' \
		'$tmp/coord-a.err' && grep -q 'another coordinator took the job over' '$tmp/coord-a.err' ||
	{ echo \"exit $rc\"; tail -5 '$tmp/coord-a.err'; false; }"
check "... without writing the state (still term 2)" test "$(term)" = 2

# 3. C acts
coordinator coord-c "$tmp/a.kubeconfig"
c=$!
check "C takes the Lease at once (given back) and acts with term 3" wait_for "$tmp/coord-c.err" "acting coordinator, term 3" 15
check "the workers rejoin C on the same address, and training goes on" wait_for "$tmp/coord-c.out" "^step" 90

# 4. C is cut off from the API; D waits, its token from an exec credential plugin
satoken=$(sed -n 's/^ *token: //p' "$tmp/sa.kubeconfig")
printf '#!/bin/sh\necho "$(date +%%s.%%N) $KUBERNETES_EXEC_INFO" >>"%s/plugin.calls"\nprintf %s "$TOKEN"\n' "$tmp" \
	"'{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}'" \
	>"$tmp/get-token"
chmod +x "$tmp/get-token"
python3 - "$tmp/sa.kubeconfig" "$satoken" >"$tmp/exec.kubeconfig" <<'PY'
import sys
text = open(sys.argv[1]).read()
exec_user = ("exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./get-token\n"
             "      env:\n      - name: TOKEN\n        value: " + sys.argv[2])
print(text.replace("token: " + sys.argv[2], exec_user), end="")
PY
coordinator coord-d "$tmp/exec.kubeconfig"
d=$!
check "D waits for the Lease C holds" wait_for "$tmp/coord-d.err" "lease $lease is held by coord-c: waiting" 20
touch "$tmp/cut"
first_c_then_d() { # C exits before D acts
	for _ in $(seq 1 300); do
		if ! kill -0 $c 2>/dev/null; then
			! grep -q 'acting coordinator' "$tmp/coord-d.err" && return 0
			echo "D acted before C stopped" >&2
			return 1
		fi
		grep -q 'acting coordinator' "$tmp/coord-d.err" && { echo "D acts while C still runs" >&2; return 1; }
		nap 0.05
	done
	return 1
}
check "cut off, C stops acting by itself before D may take over" first_c_then_d
wait_pid $c 30
rc=$?
check "C exits 3, saying it no longer acts (exit $rc)" bash -c "[ $rc = 3 ] && grep -q 'not renewed for' '$tmp/coord-c.err' &&
	grep -q 'another coordinator took the job over (the lease was lost)' '$tmp/coord-c.err'"
check "D takes the Lease over once it expired, and acts with term 4" wait_for "$tmp/coord-d.err" "acting coordinator, term 4" 30
check "the state says term 4 (D claimed it)" wait_term 4
check "D's token came from its exec credential plugin (run with client-go's KUBERNETES_EXEC_INFO)" bash -c \
	"grep -q '\"kind\":\"ExecCredential\"' '$tmp/plugin.calls' && ! grep -q 'token:' '$tmp/exec.kubeconfig'"
check "the workers rejoin D on the same address, and training goes on" wait_for "$tmp/coord-d.out" "^step" 90
check "kubectl get lease -L rowshift.io/phase,... shows D's job training on 3 workers, its step" \
	lease_shows $lease rowshift.io/phase,rowshift.io/workers,rowshift.io/step "^$lease +coord-d .* training +3 +[1-9][0-9]*\$"
n=$(steps_of coord-d)
check "... and on (more steps a few seconds later)" bash -c "sleep 3; [ \$(grep -c '^step' '$tmp/coord-d.out') -gt $n ]"

# 5. D ends and gives the Lease back
kill -TERM $d
wait_pid $d 30
rc=$?
check "SIGTERM ends D (exit $rc)" test $rc = 0
check "and D gave the Lease back: no holder" bash -c \
	"[ -z \"\$(timeout 30 $kubectl -n $ns get lease $lease -o jsonpath='{.spec.holderIdentity}')\" ] && grep -q 'lease $lease: given back' '$tmp/coord-d.err'"
kill -TERM $sim_pid
wait_pid $sim_pid 30
finish_checks k8s_leader
