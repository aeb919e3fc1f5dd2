# apisim.sh - sourced by the Kubernetes integration tests (after itest.sh):
# start_apisim starts the API simulator (tests/k8s/apisim.py) with a fresh
# bearer token (simtok), TLS (its CA in $tmp/tls/ca.crt) and a kubelet that
# runs worker pods as real rowshift-workers under $tmp/pods; sets sim_pid,
# simport and KUBECONFIG (no discovery cache shared between runs); exits
# the test when the simulator does not start. Arguments go to the simulator
# (e.g. --sa-token NS/SA=TOKEN). Deployments are only stored (--deployments
# store): the tests that apply the whole chart run the coordinator by hand,
# outside the simulator; pass --deployments run to have the simulator run
# them (ReplicaSets, pods), as k8s_incluster.sh does.
start_apisim() {
	simtok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	python3 tests/k8s/apisim.py --port 0 --port-file "$tmp/sim.port" --token "$simtok" --tls-dir "$tmp/tls" \
		--kubeconfig-out "$tmp/kubeconfig" --root "$tmp/pods" --bin-dir "$bin" --deployments store "$@" \
		>"$tmp/sim.out" 2>"$tmp/sim.err" &
	sim_pid=$!
	wait_for "$tmp/sim.port" . 30 || { echo "the simulator did not start"; cat "$tmp/sim.err"; exit 1; }
	simport=$(cat "$tmp/sim.port")
	export KUBECONFIG=$tmp/kubeconfig KUBECACHEDIR=$tmp/kube-cache
}

# start_apisim_for NS [ARGS...]: start_apisim (ARGS go to it) with a token for
# the chart's coordinator ServiceAccount in NS, whose kubeconfig is
# $tmp/sa.kubeconfig (its RBAC enforced); k runs kubectl in NS.
start_apisim_for() {
	local ns=$1 satok
	shift
	satok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	start_apisim --sa-token "$ns/rowshift-coordinator=$satok" \
		--sa-kubeconfig-out "$ns/rowshift-coordinator=$tmp/sa.kubeconfig" "$@"
	eval "k() { timeout 30 tools/bin/kubectl -n $ns \"\$@\"; }"
}

# render_chart NS PORT [HELM ARGS...]: NS created, and the chart with 2 CPU
# workers of examples/dlrm-small.json reaching the coordinator at
# ws://127.0.0.1:PORT rendered into $tmp/chart.yaml (HELM ARGS added).
render_chart() {
	local ns=$1 port=$2
	shift 2
	printf '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "%s"}}\n' "$ns" |
		timeout 30 tools/bin/kubectl apply -f - >/dev/null
	tools/bin/helm template rowshift helm/rowshift --namespace "$ns" --set workers=2 --set gpusPerWorker=0 \
		--set coordinatorURL="ws://127.0.0.1:$port" --set-file modelJson=examples/dlrm-small.json "$@" >"$tmp/chart.yaml"
}

# lease_shows LEASE LABELS PATTERN: within 15 s, `k get lease LEASE -L LABELS`
# (no headers) matches PATTERN (an extended regex); else says what it showed.
lease_shows() {
	local out
	for _ in $(seq 1 60); do
		out=$(k get lease "$1" -L "$2" --no-headers)
		echo "$out" | grep -Eq "$3" && return 0
		sleep 0.25
	done
	echo "kubectl get lease: $out" >&2
	return 1
}
