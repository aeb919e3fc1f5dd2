#!/bin/bash
# k8s_leader.sh - at most one acting coordinator: a coordination.k8s.io
# Lease, state writes fenced on the version each coordinator last wrote,
# and terms the workers check. The real kubectl and helm against the API
# simulator (tests/k8s/apisim.py), whose kubelet runs the worker pods; both
# coordinators run as the chart's ServiceAccount, so its Role must be enough:
#   1. coordinator A acts (term 1) and the workers train; B, started beside
#      it (a replacement while the old pod still runs), waits for the Lease:
#      it writes nothing and does not listen while A renews it;
#   2. A is cut off from the API (a proxy stands in for a partition): A stops
#      acting by itself (exit 3) before B may take the Lease over;
#   3. B acts with term 2 (so says the state), the workers rejoin it on the
#      same address and training goes on;
#   4. SIGTERM ends B (exit 0) and gives the Lease back (no holder), so that
#      a successor need not wait for it to expire.
set -u
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/apisim.sh"
kubectl=tools/bin/kubectl
helm=tools/bin/helm
ns=rowshift-leader
sts=rowshift-worker
lease=rowshift-worker-leader
duration=6 # the Lease's seconds (30 by default): A must give up within 4, B waits at least 6
sel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker
satok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
start_apisim --sa-token $ns/rowshift-coordinator=$satok --sa-kubeconfig-out $ns/rowshift-coordinator=$tmp/sa.kubeconfig
k() { timeout 30 $kubectl -n $ns "$@"; }

cport=$(free_port)
printf '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "%s"}}\n' $ns | timeout 30 $kubectl apply -f - >/dev/null
$helm template rowshift helm/rowshift --namespace $ns --set workers=2 --set gpusPerWorker=0 \
	--set coordinatorURL=ws://127.0.0.1:$cport --set-file modelJson=examples/dlrm-small.json >"$tmp/chart.yaml"
check "kubectl apply creates the chart's objects" bash -c "timeout 30 $kubectl apply -f $tmp/chart.yaml >$tmp/apply.out 2>&1"
jointok=$(k get secret rowshift-join-token -o jsonpath='{.data.token}' | base64 -d)
python3 tests/integration/cutproxy.py "$tmp/proxy.port" "$simport" "$tmp/cut" 2>"$tmp/proxy.err" &
wait_for "$tmp/proxy.port" . 10 || { echo "the proxy did not start"; exit 1; }
sed "s#127.0.0.1:$simport#127.0.0.1:$(cat "$tmp/proxy.port")#" "$tmp/sa.kubeconfig" >"$tmp/a.kubeconfig"
coordinator() { # NAME KUBECONFIG: as the Deployment runs it, as its ServiceAccount
	ROWSHIFT_POD_NAME=$1 ROWSHIFT_LEASE_DURATION_S=$duration ROWSHIFT_JOIN_TOKEN=$jointok \
		"$bin/rowshift-coordinator" --kubernetes --kubeconfig "$2" --namespace $ns --statefulset $sts \
		--selector "$sel" --state-configmap rowshift-state --lease $lease --config examples/dlrm-small.json \
		--listen 127.0.0.1:$cport --steps 100000000 --debounce-ms 1000 >"$tmp/$1.out" 2>"$tmp/$1.err" &
}
term() { k get configmap rowshift-state -o jsonpath='{.data.state\.json}' |
	python3 -c 'import json, sys; print(json.load(sys.stdin).get("term", 0))'; }
steps_of() { grep -c '^step' "$tmp/$1.out"; }

# 1. A acts; B waits
coordinator coord-a "$tmp/a.kubeconfig"
a=$!
check "A holds the Lease and acts, term 1" wait_for "$tmp/coord-a.err" "acting coordinator, term 1" 30
check "the workers train with A" wait_for "$tmp/coord-a.out" "^step" 60
coordinator coord-b "$tmp/sa.kubeconfig"
b=$!
check "B waits for the Lease A holds" wait_for "$tmp/coord-b.err" "lease $lease is held by coord-a: waiting" 20
sleep $((duration + 3))
b_waited() { kill -0 $a && kill -0 $b && ! grep -q 'acting coordinator' "$tmp/coord-b.err" && [ "$(term)" = 1 ]; }
check "... for longer than the Lease lasts, while A renews it: B never acted, the state is A's (term 1)" b_waited
check "A's lease is renewed as its ServiceAccount (its Role grants it)" bash -c \
	"[ \"\$(timeout 30 $kubectl -n $ns get lease $lease -o jsonpath='{.spec.holderIdentity}')\" = coord-a ]"

# 2. A is cut off from the API
touch "$tmp/cut"
first_a_then_b() { # A exits before B acts
	for _ in $(seq 1 300); do
		if ! kill -0 $a 2>/dev/null; then
			! grep -q 'acting coordinator' "$tmp/coord-b.err" && return 0
			echo "B acted before A stopped" >&2
			return 1
		fi
		grep -q 'acting coordinator' "$tmp/coord-b.err" && { echo "B acts while A still runs" >&2; return 1; }
		sleep 0.05
	done
	return 1
}
check "cut off, A stops acting by itself before B may take over" first_a_then_b
wait $a
rc=$?
check "A exits 3, saying it no longer acts (exit $rc)" bash -c "[ $rc = 3 ] && grep -q 'not renewed for' '$tmp/coord-a.err' &&
	grep -q 'another coordinator took the job over (the lease was lost)' '$tmp/coord-a.err'"

# 3. B acts
check "B takes the Lease over once it expired, and acts with term 2" wait_for "$tmp/coord-b.err" "acting coordinator, term 2" 30
check "the state says term 2 (B claimed it)" test "$(term)" = 2
check "the workers rejoin B on the same address, and training goes on" wait_for "$tmp/coord-b.out" "^step" 90
n=$(steps_of coord-b)
check "... and on (more steps a few seconds later)" bash -c "sleep 3; [ \$(grep -c '^step' '$tmp/coord-b.out') -gt $n ]"

# 4. B ends and gives the Lease back
kill -TERM $b
wait $b
rc=$?
check "SIGTERM ends B (exit $rc)" test $rc = 0
check "and B gave the Lease back: no holder" bash -c \
	"[ -z \"\$(timeout 30 $kubectl -n $ns get lease $lease -o jsonpath='{.spec.holderIdentity}')\" ] && grep -q 'lease $lease: given back' '$tmp/coord-b.err'"
kill -TERM $sim_pid
wait $sim_pid
finish_checks k8s_leader
