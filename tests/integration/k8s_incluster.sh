#!/bin/bash
# k8s_incluster.sh - the chart as shipped, coordinator included, inside the
# API simulator (tests/k8s/apisim.py): `helm install`, then the simulator's
# Deployment controller runs the coordinator pod, its kubelet gives it the
# ServiceAccount's token (in its own mount namespace, at the standard
# /var/run/secrets/kubernetes.io/serviceaccount) and KUBERNETES_SERVICE_*,
# and the workers reach the coordinator at its Service's clusterIP (pinned
# with coordinator.service.clusterIP; there is no DNS, so coordinatorURL
# names it). The Service's port is the pod's (7070), so the simulator's
# kube-proxy leaves the address to the coordinator's wildcard listener
# (pods share the host's network; tests/k8s/README.md, "kube-proxy"):
#   1. the Deployment makes a ReplicaSet DEPLOY-<hash> and a pod
#      DEPLOY-<hash>-<5>, owned in turn, running as the chart's ServiceAccount
#      with the in-cluster config (its log says so); the pod's token is that
#      ServiceAccount's, bound by the Role (the simulator enforces RBAC: a
#      list of secrets is 403);
#   2. the workers join through the Service's clusterIP and the job trains to
#      the end (`kubectl logs deploy/...` says so); the coordinator, allowed
#      by its Role, scales the StatefulSet to 0; `kubectl rollout status`
#      succeeds and `kubectl get deploy` shows 1/1;
#   3. the coordinator pod deleted, the Deployment starts another, which
#      finds the job done and never trains again.
set -u
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/apisim.sh"
kubectl=tools/bin/kubectl
helm=tools/bin/helm
ns=rowshift-incluster
sts=rowshift-worker
deploy=rowshift-coordinator
steps=30
cip=127.1.70.70 # the coordinator Service's clusterIP
sel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker
csel=app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=coordinator
start_apisim --deployments run
k() { timeout 30 $kubectl -n $ns "$@"; }
api() { curl -s --cacert "$tmp/tls/ca.crt" "$@"; }
if ! api -H "Authorization: Bearer $simtok" "https://127.0.0.1:$simport/_sim/healthz" | grep -q '"mountNamespaces":true'; then
	echo "SKIP: no mount namespaces here (neither root nor user namespaces): a pod cannot find its token at the standard path"
	exit 77
fi
retry() { # retry SECONDS CMD...: until CMD succeeds
	local n=$(($1 * 4)); shift
	for _ in $(seq 1 $n); do "$@" 2>/dev/null && return 0; sleep 0.25; done
	"$@"
}

# 1. helm install; the Deployment runs the coordinator as its ServiceAccount, in-cluster
printf '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "%s"}}\n' $ns | timeout 30 $kubectl apply -f - >/dev/null
check "helm install (coordinatorURL ws://$cip:7070, coordinator.service.clusterIP $cip)" bash -c \
	"timeout 60 $helm install rowshift helm/rowshift --namespace $ns --set workers=2 --set gpusPerWorker=0 \
	--set coordinatorURL=ws://$cip:7070 --set coordinator.service.clusterIP=$cip --set steps=$steps --set debounceMs=1000 \
	--set-file modelJson=examples/dlrm-small.json >'$tmp/install.out' 2>&1 || { cat '$tmp/install.out'; false; }"
check "the Service has clusterIP $cip" test "$(k get svc $deploy -o jsonpath='{.spec.clusterIP}')" = $cip
coord_pod() { # the coordinator pod that runs and is not being deleted
	k get pods -l "$csel" -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}' |
		awk '$2 == "Running" && NF == 2 {print $1}' | tail -1
}
retry 20 test -n "$(coord_pod)"
pod1=$(coord_pod)
owned() { # the pod is DEPLOY-HASH-XXXXX, owned by ReplicaSet DEPLOY-HASH (pod-template-hash HASH), owned by the Deployment
	local rs hash
	rs=$(k get pod "$pod1" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')
	hash=$(k get pod "$pod1" -o jsonpath='{.metadata.labels.pod-template-hash}')
	[ "$rs" = "ReplicaSet/$deploy-$hash" ] && [[ $pod1 =~ ^$deploy-$hash-[a-z0-9]{5}$ ]] &&
		[ "$(k get rs $deploy-$hash -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')" = "Deployment/$deploy" ] ||
		{ echo "pod $pod1, owner $rs, hash $hash" >&2; return 1; }
}
check "the Deployment made a ReplicaSet, which made the coordinator pod ($pod1)" owned
check "the pod runs as ServiceAccount $deploy, its token mounted at /var/run/secrets/kubernetes.io/serviceaccount" bash -c \
	"[ \"\$(timeout 30 $kubectl -n $ns get pod $pod1 -o jsonpath='{.spec.serviceAccountName} {.spec.containers[0].volumeMounts[?(@.mountPath==\"/var/run/secrets/kubernetes.io/serviceaccount\")].readOnly}')\" = '$deploy true' ]"
check "its log: the in-cluster config" retry 20 bash -c \
	"timeout 30 $kubectl -n $ns logs $pod1 | grep -q 'kubernetes: in-cluster (/var/run/secrets/kubernetes.io/serviceaccount), namespace $ns'"
token_denied() { # the pod's token is the ServiceAccount's, which its Role does not let list secrets
	local tok
	tok=$(cat "$tmp/pods/$ns/$pod1"/volumes/kube-api-access-*/token) || return 1
	api -H "Authorization: Bearer $tok" "https://127.0.0.1:$simport/api/v1/namespaces/$ns/secrets" >"$tmp/denied.json"
	grep -q "User \\\\\"system:serviceaccount:$ns:$deploy\\\\\" cannot list resource \\\\\"secrets\\\\\"" "$tmp/denied.json" ||
		{ cat "$tmp/denied.json" >&2; return 1; }
}
check "the pod's token is the ServiceAccount's, held to its Role (a list of secrets: 403)" token_denied

# 2. the workers join through the clusterIP; the job trains to the end; the StatefulSet goes to 0
check "the job trains its $steps steps (kubectl logs deploy/$deploy)" retry 60 bash -c \
	"timeout 30 $kubectl -n $ns logs deploy/$deploy | grep -q '^training done: 2 workers, $steps steps'"
check "the workers reached it at ws://$cip:7070, the Service's clusterIP" bash -c \
	"k() { timeout 30 $kubectl -n $ns \"\$@\"; }; [ \"\$(k get sts $sts -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name==\"ROWSHIFT_COORDINATOR\")].value}')\" = ws://$cip:7070 ] &&
	[ \$(k logs $pod1 | grep -Ec '$sts-[01] joined') -ge 2 ]"
scaled_to_0() {
	[ "$(k get statefulset $sts -o jsonpath='{.spec.replicas}')" = 0 ] && [ -z "$(k get pods -l "$sel" -o name)" ]
}
check "the coordinator scaled the StatefulSet to 0 (its Role allows it) and the worker pods are gone" retry 30 scaled_to_0
check "kubectl rollout status deploy/$deploy succeeds" bash -c \
	"timeout 40 $kubectl -n $ns rollout status deploy/$deploy --timeout=35s >'$tmp/rollout.out' 2>&1 || { cat '$tmp/rollout.out'; false; }"
check "kubectl get deploy: 1/1, up to date, available" bash -c \
	"timeout 30 $kubectl -n $ns get deploy $deploy --no-headers | awk '{exit !(\$2 == \"1/1\" && \$3 == 1 && \$4 == 1)}'"

# 3. the coordinator pod deleted: the Deployment starts another, which finds the job done
k delete pod "$pod1" --wait=false >/dev/null
new_pod() { local p; p=$(coord_pod); [ -n "$p" ] && [ "$p" != "$pod1" ]; }
check "the Deployment replaces the deleted coordinator pod" retry 30 new_pod
pod2=$(coord_pod)
check "the new coordinator ($pod2) finds the job done" retry 40 bash -c \
	"timeout 30 $kubectl -n $ns logs $pod2 | grep -q 'in phase done: the job is over'"
check "... and trains nothing" bash -c "sleep 1; ! timeout 30 $kubectl -n $ns logs $pod2 | grep -Eq '^(step|training done)'"
check "kubectl rollout status deploy/$deploy succeeds again" bash -c \
	"timeout 40 $kubectl -n $ns rollout status deploy/$deploy --timeout=35s >'$tmp/rollout2.out' 2>&1 || { cat '$tmp/rollout2.out'; false; }"
kill -TERM $sim_pid
wait_pid $sim_pid 20
check "the simulator stops and leaves no process behind" bash -c "! pgrep -f '[r]owshift-(worker|coordinator) .*$tmp/pods' >/dev/null"
[ "$fails" = 0 ] || { for p in "$tmp/pods/$ns"/*/; do echo "== $p"; tail -15 "$p"/*.log; done; tail -30 "$tmp/sim.err"; }
finish_checks k8s_incluster
