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
