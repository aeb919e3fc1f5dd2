#!/bin/bash
# k8s_manifests.sh - the Kubernetes deployment files, checked offline with the
# real helm (tools/bin) and the YAML checks of k8s_manifests.mjs (node, the
# pinned `yaml` package in tools/); no cluster, no container engine:
#   1. `helm lint --strict` passes; `helm template` renders the chart as
#      release `rowshift` in namespace `rowshift`; every object of it, of the
#      plain manifests and of the GPU, metrics and custom-image renders is
#      valid against the Kubernetes OpenAPI schemas (kubernetes-models in
#      tools/; the ServiceMonitor's CRD is named as not covered);
#   2. the rendered chart and manifests/*.yaml define the same objects and
#      agree on every field (labels naming the tool, the image tag, the
#      Secret's value and the model config's formatting aside); a changed
#      manifest is caught;
#   3. both hold the contract the coordinator's Kubernetes mode is written
#      against (names, args, env, ports, probes, volumes, selectors, labels,
#      the leader Lease's name and the pod's name as its identity),
#      carry examples/dlrm-small.json as the model, give the coordinator
#      exactly its Role (a widened Role is caught), and run nothing as root;
#   4. values.schema.json refuses bad values (negative workers, a non-integer
#      gpusPerWorker, ...); a set joinToken is rendered into the Secret, an
#      empty one is generated; gpusPerWorker 0 removes the GPU limit;
#      statusToken, modelJson and another release name render as documented;
#      the kubectl commands manifests/ documents (secret, model) make what
#      the pods read;
#   5. NOTES.txt says how to watch, scale and get the token; the Dockerfile
#      and .dockerignore have what the manifests rely on;
#   6. the platform review (issue 16): Guaranteed QoS, the workers'
#      PodDisruptionBudget, the coordinator's startup probe (90 s or more);
#      the workers' readiness probe (Ready means joined: ROWSHIFT_READY_FILE
#      on an in-memory emptyDir at /run/rowshift, tested by the probe);
#      a failed node under the coordinator (its tolerations, 30 s by default,
#      merged with the user's; the workers' 300 s coordinatorGraceMs); explicit devices
#      (--device, NVIDIA_VISIBLE_DEVICES=void, transport, gpuResourceName) and
#      GPU values (nccl), linted; metrics values (ServiceMonitor), linted;
#      custom-image values (digest), linted; the escape hatches of both pods;
#      existingSecret; and, against the API simulator with the real helm, an
#      upgrade after `kubectl scale` keeps the size (workers is the initial
#      size only).
set -u
. "$(dirname "$0")/../lib/itest.sh"
helm=tools/bin/helm
chart=helm/rowshift
[ -x "$helm" ] || { echo "FAILED: $helm is missing (make tools)"; exit 1; }
[ -f tools/node_modules/yaml/package.json ] || { echo "FAILED: the yaml package is not installed (make tools)"; exit 1; }
# $js COMMAND ARGS...: k8s_manifests.mjs COMMAND ARGS, run by one node serving them all (its --serve; a
# node start costs 0.35 s of CPU, and the checks make some sixty): what the command printed, and its exit
# status; 2 when the node gives no answer in 60 s or has died (and $js_at.lost made: a check that expects a
# refusal must not pass for that). A program ($tmp/js), so that it runs under bash -c, timeout or xargs
# as node did; calls one at a time (an answer with another call's ID is dropped as a late one).
js_at=$tmp/js
mkfifo "$js_at.req" "$js_at.resp"
node tests/integration/k8s_manifests.mjs --serve "$js_at" &
js_pid=$!
export js_at js_pid
read -r -t 60 ready 0<>"$js_at.resp" && [ "$ready" = ready ] ||
	{ echo "FAILED: k8s_manifests.mjs --serve was not ready in 60 s"; exit 1; }
js=$tmp/js
cat >"$js" <<'EOF'
#!/bin/bash
id="$$.$RANDOM"
printf '%s\0' "$id" $# "$@" 1<>"$js_at.req" # (read-write: no wait for a reader, should the server be gone)
for _ in $(seq 60); do
	while read -r -t 1 got rc 0<>"$js_at.resp"; do
		[ "$got" = "$id" ] || continue
		cat "$js_at.$id.out" && cat "$js_at.$id.err" >&2
		rm -f "$js_at.$id".*
		exit "$rc"
	done
	kill -0 "$js_pid" 2>/dev/null || break
done
echo "$0: no answer from k8s_manifests.mjs --serve to '$*' (it has exited or took over 60 s)" >&2
: >"$js_at.lost"
exit 2
EOF
chmod +x "$js"
manifests=(manifests/*.yaml)
render() { "$helm" template rowshift "$chart" --namespace rowshift "$@"; }

# 1. lint and render
check "helm lint --strict passes" bash -c "'$helm' lint --strict '$chart' >'$tmp/lint.out' 2>&1 || { cat '$tmp/lint.out'; false; }"
check "helm template renders the chart" bash -c "'$helm' template rowshift '$chart' --namespace rowshift >'$tmp/chart.yaml' 2>'$tmp/render.err' || { cat '$tmp/render.err'; false; }"
check "every object of the chart's defaults is valid against the Kubernetes schemas (kubernetes-models)" $js schemas "$tmp/chart.yaml"
check "every object of the plain manifests too" $js schemas "${manifests[@]}"
sed 's/containerPort: 7070/containerPort: "7070"/' "$tmp/chart.yaml" >"$tmp/badport.yaml"
check "... and the schema check catches a port that is a string" bash -c \
	"! $js schemas '$tmp/badport.yaml' 2>'$tmp/badport.err' && grep -q 'containerPort must be integer' '$tmp/badport.err'"

# 2. chart and manifests agree
check "chart and manifests define the same objects, field by field" $js same "$tmp/chart.yaml" "${manifests[@]}"
mkdir -p "$tmp/changed"
cp "${manifests[@]}" "$tmp/changed/"
sed -i 's/podManagementPolicy: Parallel/podManagementPolicy: OrderedReady/' "$tmp/changed/50-worker.yaml"
check "a manifest that differs from the chart (podManagementPolicy) is caught" \
	bash -c "! $js same '$tmp/chart.yaml' '$tmp'/changed/*.yaml 2>'$tmp/changed.err' && grep -q podManagementPolicy '$tmp/changed.err'"

# 3. the contract, the model, RBAC, non-root
check "the chart holds the contract (names, args, env, ports, probes, volumes, labels)" $js contract "$tmp/chart.yaml" --helm
check "the manifests hold the contract" $js contract "${manifests[@]}"
check "the chart's model.json is examples/dlrm-small.json" $js model "$tmp/chart.yaml" examples/dlrm-small.json
check "the manifests' model.json is examples/dlrm-small.json" $js model "${manifests[@]}" examples/dlrm-small.json
check "the chart's Role grants exactly pods get/list/watch, configmaps get/create/update, leases create and get/update (its own), events create, the worker StatefulSet get and scale" $js rbac "$tmp/chart.yaml"
check "the manifests' Role grants exactly the same" $js rbac "${manifests[@]}"
sed 's/verbs: \["get", "list", "watch"\]/verbs: ["get", "list", "watch", "delete"]/' manifests/10-rbac.yaml >"$tmp/wide-rbac.yaml"
printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: extra}\nrules: [{apiGroups: ["*"], resources: ["secrets"], verbs: ["*"]}]\n' >>"$tmp/wide-rbac.yaml"
check "a wider Role (pods delete, a ClusterRole on secrets) is caught" bash -c "! $js rbac '$tmp/wide-rbac.yaml' 2>/dev/null"
sed '/resourceNames: \["rowshift-worker-leader"\]/d' manifests/10-rbac.yaml >"$tmp/wide-lease.yaml"
check "a Role updating any Lease (no resourceNames) is caught" bash -c \
	"! grep -q rowshift-worker-leader '$tmp/wide-lease.yaml' && ! $js rbac '$tmp/wide-lease.yaml' 2>/dev/null"
sed 's/verbs: \["get", "update"\]/verbs: ["get", "update", "delete"]/' manifests/10-rbac.yaml >"$tmp/del-lease.yaml"
check "a Role deleting the Lease (or the state) is caught" bash -c "grep -q '\"delete\"' '$tmp/del-lease.yaml' && ! $js rbac '$tmp/del-lease.yaml' 2>/dev/null"
check "no container of the chart runs as root" $js nonroot "$tmp/chart.yaml"
check "no container of the manifests runs as root" $js nonroot "${manifests[@]}"
sed 's/runAsUser: 10001/runAsUser: 0/' manifests/50-worker.yaml >"$tmp/root-worker.yaml"
check "a container running as uid 0 is caught" bash -c "! $js nonroot manifests/40-coordinator.yaml '$tmp/root-worker.yaml' 2>/dev/null"

# NetworkPolicy: on by default, off when asked, extra clients of the coordinator's port rendered
check "the chart restricts who connects: the workers only from workers, the coordinator's port from workers" bash -c \
	"grep -c '^kind: NetworkPolicy' '$tmp/chart.yaml' | grep -qx 2"
render --set networkPolicy.enabled=false >"$tmp/nonp.yaml" 2>&1
check "networkPolicy.enabled=false leaves them out" bash -c "! grep -q 'kind: NetworkPolicy' '$tmp/nonp.yaml'"
render --set 'networkPolicy.coordinatorClients[0].namespaceSelector.matchLabels.team=monitoring' >"$tmp/np.yaml" 2>&1
check "networkPolicy.coordinatorClients are let in to the coordinator's port" grep -q 'team: monitoring' "$tmp/np.yaml"
render --set checkpoint.existingClaim=ckpts --set checkpoint.every=500 --set checkpoint.keep=3 >"$tmp/ckpt.yaml" 2>&1
check "checkpoint.existingClaim: both pods mount it at /checkpoints; the final model and periodic checkpoints go there" \
	$js checkpoint "$tmp/ckpt.yaml"
render --set checkpoint.existingClaim=ckpts >"$tmp/ckpt0.yaml" 2>&1
check "... with every: 0, the final model only" bash -c "grep -q /checkpoints/final '$tmp/ckpt0.yaml' && ! grep -q checkpoint-every '$tmp/ckpt0.yaml'"
render --set checkpoint.existingClaim=ckpts --set checkpoint.intervalSeconds=600 >"$tmp/ckpti.yaml" 2>&1
check "... with intervalSeconds only, periodic checkpoints by time" bash -c "grep -A1 -- '- --checkpoint-interval' '$tmp/ckpti.yaml' | grep -q '\"600\"' && grep -q -- '- /checkpoints/periodic' '$tmp/ckpti.yaml' && ! grep -q checkpoint-every '$tmp/ckpti.yaml'"
check "without it nothing is saved (no --save, no volume)" bash -c "! grep -q 'checkpoints' '$tmp/chart.yaml'"
render --set tls.secretName=rowshift-tls >"$tmp/tls.yaml" 2>&1
check "tls.secretName: the coordinator serves TLS with the Secret's certificate and key, probes and scraping over https" \
	$js tls "$tmp/tls.yaml"
# (the Secret's join token, random base64, left out: it spells "tls" in about one render in 500)
check "without tls.secretName nothing of TLS is rendered" bash -c "! grep -v '^ *token: \"' '$tmp/chart.yaml' | grep -qi 'tls'"
render --set tls.secretName=rowshift-tls --set tls.caKey= >"$tmp/tls-system.yaml" 2>&1
check "tls.caKey \"\": the workers verify against the system CAs (no CA mounted), still over wss://" bash -c \
	"grep -q 'wss://rowshift-coordinator:7070' '$tmp/tls-system.yaml' && ! grep -q 'ROWSHIFT_TLS_CA\|tls-ca' '$tmp/tls-system.yaml'"
render --set tls.secretName=rowshift-tls --set tls.caSecretName=corp-ca --set tls.caKey=root.pem >"$tmp/tls-ca.yaml" 2>&1
check "tls.caSecretName and caKey: the workers' CA comes from that Secret's key" bash -c \
	"grep -A3 'secretName: corp-ca' '$tmp/tls-ca.yaml' | grep -q '{key: root.pem, path: ca.crt}'"
"$helm" install rowshift "$chart" --namespace rowshift --dry-run=client --set tls.secretName=rowshift-tls >"$tmp/install-tls.out" 2>&1
check "NOTES.txt over TLS: https and wss through the port-forward, and the CA for rowshiftctl" bash -c "
	grep -q 'https://localhost:7070/' '$tmp/install-tls.out' && grep -q 'ROWSHIFT_TLS_CA=<ca.crt> rowshiftctl status --watch --coordinator wss://localhost:7070' '$tmp/install-tls.out'"
render --set 'coordinator.allowedHosts[0]=rowshift.example.com' >"$tmp/hosts.yaml" 2>&1
check "coordinator.allowedHosts adds to the Service's names a browser may use" grep -q \
	'value: "rowshift-coordinator,rowshift-coordinator.rowshift,rowshift-coordinator.rowshift.svc,rowshift-coordinator.rowshift.svc.cluster.local,rowshift.example.com"' "$tmp/hosts.yaml"

# 4. values
rejects() { # rejects VALUE PATTERN: the schema refuses --set VALUE, saying PATTERN
	! render --set "$1" >/dev/null 2>"$tmp/bad.err" && grep -q "values don't meet the specifications of the schema" "$tmp/bad.err" &&
		grep -q "$2" "$tmp/bad.err" && ! "$helm" lint "$chart" --set "$1" >/dev/null 2>&1
}
check "the schema rejects workers: -1 (template and lint)" rejects workers=-1 "/workers"
check "the schema rejects gpusPerWorker: \"x\"" rejects gpusPerWorker=x "/gpusPerWorker"
check "the schema rejects gpusPerWorker: 1.5" rejects gpusPerWorker=1.5 "/gpusPerWorker"
check "the schema rejects a short joinToken" rejects joinToken=short "/joinToken"
check "the schema rejects an unknown key" rejects wrokers=3 "wrokers"
check "the schema rejects terminationGracePeriodSeconds: -5" rejects terminationGracePeriodSeconds=-5 "/terminationGracePeriodSeconds"
check "the schema rejects an unknown image.pullPolicy" rejects image.pullPolicy=Sometimes "/image/pullPolicy"
check "the schema rejects a host name with a comma in coordinator.allowedHosts" rejects "coordinator.allowedHosts[0]=a\\,b" "/coordinator/allowedHosts"
check "the schema rejects checkpoint.keep: 0" rejects checkpoint.keep=0 "/checkpoint/keep"
hangup_range() { rejects wsHangupSeconds=2 /wsHangupSeconds && rejects wsHangupSeconds=3601 /wsHangupSeconds; }
check "the schema rejects wsHangupSeconds: 2 and 3601" hangup_range
both_hangup() { # the coordinator's flag and every worker's variable, the same
	render --set wsHangupSeconds=120 >"$tmp/hangup.yaml" && grep -A1 -- '- --ws-hangup-s' "$tmp/hangup.yaml" | grep -q '"120"' &&
		grep -A1 'name: ROWSHIFT_WS_HANGUP_S' "$tmp/hangup.yaml" | grep -q 'value: "120"' &&
		! grep -q 'ws-hangup-s\|WS_HANGUP' "$tmp/chart.yaml"
}
check "wsHangupSeconds reaches the coordinator (--ws-hangup-s) and the workers (ROWSHIFT_WS_HANGUP_S); the default (600) renders neither" both_hangup
check "the schema rejects a tls.secretName that is not a Secret's name" rejects 'tls.secretName=Bad_Name' "/tls/secretName"
check "the schema rejects a coordinator.service.clusterIP that is no IP" rejects coordinator.service.clusterIP=coordinator "/coordinator/service/clusterIP"
svc_ip() { render --show-only templates/coordinator.yaml "$@" | sed -n '/^kind: Service$/,$p' | grep -E '^  clusterIP: '; }
pinned_ip() { [ "$(svc_ip --set coordinator.service.clusterIP=10.96.7.70)" = '  clusterIP: "10.96.7.70"' ] && [ -z "$(svc_ip)" ]; }
check "coordinator.service.clusterIP pins the Service's clusterIP; empty (the default) renders none (allocated)" pinned_ip
check "the schema accepts workers: 8, gpusPerWorker: 0, steps: -1" bash -c "'$helm' template rowshift '$chart' --set workers=8 --set gpusPerWorker=0 --set steps=-1 >/dev/null"

given=abcdefghijklmnopqrstuvwxyz0123456789ABCD
render --set joinToken=$given >"$tmp/given.yaml"
check "a set joinToken is rendered into the Secret" test "$($js token "$tmp/given.yaml")" = "$given"
t1=$($js token "$tmp/chart.yaml"); render >"$tmp/chart2.yaml"; t2=$($js token "$tmp/chart2.yaml")
check "an empty joinToken is generated: 32+ random characters ($(( ${#t1} )) here)" \
	bash -c "[[ '$t1' =~ ^[A-Za-z0-9]{32,}$ ]] && [ '$t1' != '$t2' ]"
check "the generated token is looked up from the cluster first (kept across upgrades)" \
	grep -q 'lookup "v1" "Secret"' "$chart/templates/_helpers.tpl"

check "the worker has one GPU by default" test "$($js gpu "$tmp/chart.yaml")" = 1
render --set gpusPerWorker=0 --set worker.resources.limits.memory=8Gi >"$tmp/cpu.yaml"
check "gpusPerWorker: 0 removes the GPU limit (and keeps the other resources)" \
	bash -c "[ \"\$($js gpu '$tmp/cpu.yaml')\" = none ] && grep -q 'memory: 8Gi' '$tmp/cpu.yaml'"
render --set gpusPerWorker=2 --set worker.resources.limits.memory=8Gi >"$tmp/gpu2.yaml"
check "gpusPerWorker: 2 merges into worker.resources" \
	bash -c "[ \"\$($js gpu '$tmp/gpu2.yaml')\" = 2 ] && grep -q 'memory: 8Gi' '$tmp/gpu2.yaml'"

render --set statusToken=s3cret --set workers=5 --set steps=777 --set debounceMs=2500 >"$tmp/status.yaml"
check "statusToken adds the Secret's status-token and the coordinator's ROWSHIFT_STATUS_TOKEN" \
	bash -c "grep -q 'status-token: \"czNjcmV0\"' '$tmp/status.yaml' && grep -q 'name: ROWSHIFT_STATUS_TOKEN' '$tmp/status.yaml'"
check "workers sets the StatefulSet's replicas" grep -q '^  replicas: 5$' "$tmp/status.yaml"
check "steps and debounceMs reach the coordinator's args" \
	bash -c "grep -A1 -- '- --steps' '$tmp/status.yaml' | grep -q '\"777\"' && grep -A1 -- '- --debounce-ms' '$tmp/status.yaml' | grep -q '\"2500\"'"
render --set-file modelJson=examples/minimal.json >"$tmp/minimal.yaml"
check "modelJson replaces the model whole" $js model "$tmp/minimal.yaml" examples/minimal.json
echo '[1, 2]' >"$tmp/notamodel.json"
check "a modelJson that is not a model config is refused" bash -c "! '$helm' template rowshift '$chart' --set-file modelJson='$tmp/notamodel.json' >/dev/null 2>&1"
"$helm" template train "$chart" --namespace ml >"$tmp/other.yaml" 2>&1
check "another release and namespace name every object after the release" bash -c \
	"grep -q 'name: train-worker$' '$tmp/other.yaml' && grep -q 'ws://train-coordinator:7070' '$tmp/other.yaml' &&
	 grep -q 'resourceNames: \[\"train-worker-leader\"\]' '$tmp/other.yaml' && grep -q 'value: \"train-worker-leader\"' '$tmp/other.yaml' &&
	 grep -q 'train-state' '$tmp/other.yaml' && ! grep -q 'name: rowshift-\|namespace: rowshift\|ws://rowshift' '$tmp/other.yaml'"

# the kubectl commands manifests/ documents for the Secret and the model (offline: --dry-run=client)
kubectl() { KUBECONFIG=/dev/null tools/bin/kubectl "$@"; }
kubectl -n rowshift create secret generic rowshift-join-token --from-literal=token=$given \
	--dry-run=client -o yaml >"$tmp/kc-secret.yaml" 2>&1
kubectl -n rowshift create configmap rowshift-model --from-file=model.json=examples/minimal.json \
	--dry-run=client -o yaml >"$tmp/kc-model.yaml" 2>&1
check "the documented 'kubectl create secret' and 'create configmap' make the objects the pods read" bash -c "
	[ \"\$($js token '$tmp/kc-secret.yaml')\" = $given ] && $js model '$tmp/kc-model.yaml' examples/minimal.json >/dev/null &&
	grep -q 'create secret generic rowshift-join-token' manifests/20-secret.yaml &&
	grep -q 'create configmap rowshift-model' manifests/30-model.yaml"

# 5. NOTES, Dockerfile
"$helm" install rowshift "$chart" --namespace rowshift --dry-run=client >"$tmp/install.out" 2>&1
check "NOTES.txt: port-forward, the dashboard, rowshiftctl status --watch, kubectl scale, the token, where the job stands" bash -c "
	grep -q 'kubectl --namespace rowshift port-forward svc/rowshift-coordinator 7070' '$tmp/install.out' &&
	grep -q 'http://localhost:7070/' '$tmp/install.out' &&
	grep -q 'rowshiftctl status --watch --coordinator ws://localhost:7070' '$tmp/install.out' &&
	grep -q 'scale statefulset/rowshift-worker --replicas=N' '$tmp/install.out' &&
	grep -q 'get secret rowshift-join-token' '$tmp/install.out' &&
	grep -q 'get lease rowshift-worker-leader -L rowshift.io/phase,rowshift.io/generation' '$tmp/install.out'"
check "the Dockerfile installs the three binaries and runs as uid 10001" bash -c "
	grep -q '^USER 10001' Dockerfile &&
	for b in rowshift-coordinator rowshift-worker rowshiftctl; do grep -q \"build/bin/\$b\" Dockerfile || exit 1; done &&
	grep -q '/usr/local/bin/' Dockerfile && grep -q '^FROM .*runtime' Dockerfile"
check ".dockerignore leaves out build/, tools/, node_modules and .git" bash -c "
	for p in build tools node_modules .git; do grep -qx \"/\\?\$p/\\?\" .dockerignore || exit 1; done"

# 6. the platform review (issue 16)
lint_with() { "$helm" lint --strict "$chart" "$@" >"$tmp/lint-v.out" 2>&1 || { cat "$tmp/lint-v.out"; false; }; }
# protected workers: Guaranteed QoS, a PodDisruptionBudget, priority classes, the coordinator's startup probe
check "the chart's containers have Guaranteed QoS (cpu and memory requests equal limits)" $js qos "$tmp/chart.yaml"
check "the manifests' containers too" $js qos "${manifests[@]}"
sed '/^            limits:$/,/memory:/ s/memory: 2Gi$/memory: 3Gi/' manifests/50-worker.yaml >"$tmp/burst-worker.yaml"
check "a worker whose memory limit differs from its request is caught" bash -c \
	"grep -q 'memory: 3Gi' '$tmp/burst-worker.yaml' && ! $js qos manifests/40-coordinator.yaml '$tmp/burst-worker.yaml' 2>/dev/null"
sed 's/^  maxUnavailable: 1$/  maxUnavailable: 3/' manifests/50-worker.yaml >"$tmp/pdb3.yaml"
check "a PodDisruptionBudget other than maxUnavailable 1 is caught" bash -c \
	"grep -q 'maxUnavailable: 3' '$tmp/pdb3.yaml' && ! $js contract manifests/[0-46]*.yaml '$tmp/pdb3.yaml' 2>/dev/null"
sed '/^          startupProbe:$/,/^            failureThreshold: 60$/d' manifests/40-coordinator.yaml >"$tmp/nostartup.yaml"
check "a coordinator without its startup probe is caught" bash -c \
	"! grep -q startupProbe '$tmp/nostartup.yaml' && ! $js contract manifests/[0-35-6]*.yaml '$tmp/nostartup.yaml' 2>/dev/null"
# Ready means joined: the PodDisruptionBudget counts a worker still joining as unavailable
sed 's|"/run/rowshift/ready"|"/tmp/ready"|' manifests/50-worker.yaml >"$tmp/probe-elsewhere.yaml"
check "a worker whose readiness probe tests another file than its ROWSHIFT_READY_FILE is caught" bash -c \
	"grep -q '\"/tmp/ready\"' '$tmp/probe-elsewhere.yaml' && ! $js contract manifests/[0-46]*.yaml '$tmp/probe-elsewhere.yaml' 2>/dev/null"
sed '/^          readinessProbe:$/,/^            successThreshold: 1$/d' manifests/50-worker.yaml >"$tmp/noprobe.yaml"
check "a worker without its readiness probe (Ready as soon as it runs) is caught" bash -c \
	"! grep -q readinessProbe '$tmp/noprobe.yaml' && ! $js contract manifests/[0-46]*.yaml '$tmp/noprobe.yaml' 2>/dev/null"
sed '/^        - name: run$/,/^            sizeLimit: 1Mi$/d' manifests/50-worker.yaml >"$tmp/norun.yaml"
check "a worker without the emptyDir for its ready file (a read-only root filesystem) is caught" bash -c \
	"! grep -q 'sizeLimit: 1Mi' '$tmp/norun.yaml' && ! $js contract manifests/[0-46]*.yaml '$tmp/norun.yaml' 2>/dev/null"
render --set podDisruptionBudget.enabled=false >"$tmp/nopdb.yaml" 2>&1
check "podDisruptionBudget.enabled=false leaves it out" bash -c \
	"grep -q 'kind: StatefulSet' '$tmp/nopdb.yaml' && ! grep -q 'kind: PodDisruptionBudget' '$tmp/nopdb.yaml'"
check "the schema rejects podDisruptionBudget.maxUnavailable: 0 (no drain could ever finish)" \
	rejects podDisruptionBudget.maxUnavailable=0 "/podDisruptionBudget/maxUnavailable"
check "no priorityClassName by default" bash -c "! grep -q priorityClassName '$tmp/chart.yaml'"

# a failed node under the coordinator: its pod replaced after 30 s, not 300 s; the workers wait long enough
nf="node.kubernetes.io/not-ready:Exists:NoExecute"; un="node.kubernetes.io/unreachable:Exists:NoExecute"
check "the coordinator tolerates a NotReady or unreachable node 30 s by default (chart)" test "$($js tolerations "$tmp/chart.yaml")" = "$nf:30 $un:30"
check "... and in the manifests" test "$($js tolerations "${manifests[@]}")" = "$nf:30 $un:30"
check "... the workers get no such tolerations" bash -c "[ \"\$(grep -c 'node.kubernetes.io/unreachable' '$tmp/chart.yaml')\" = 1 ]"
render --set coordinator.nodeFailureTolerationSeconds=60 >"$tmp/tol60.yaml" 2>&1
check "coordinator.nodeFailureTolerationSeconds sets both" test "$($js tolerations "$tmp/tol60.yaml")" = "$nf:60 $un:60"
cat >"$tmp/tol-values.yaml" <<'YAML'
coordinator:
  tolerations:
    - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 120}
    - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoSchedule}
    - {key: system, operator: Exists, effect: NoSchedule}
YAML
check "tolerations values pass helm lint --strict" lint_with -f "$tmp/tol-values.yaml"
render -f "$tmp/tol-values.yaml" >"$tmp/tol.yaml" 2>&1
check "coordinator.tolerations: the user's for the same key (NoExecute) replaces the chart's, the others are appended" \
	test "$($js tolerations "$tmp/tol.yaml")" = "$nf:30 $un:120 node.kubernetes.io/not-ready:Exists:NoSchedule:- system:Exists:NoSchedule:-"
check "the schema rejects coordinator.nodeFailureTolerationSeconds: -1" \
	rejects coordinator.nodeFailureTolerationSeconds=-1 "/coordinator/nodeFailureTolerationSeconds"
check "the workers wait 300 s for their coordinator by default (coordinatorGraceMs)" bash -c \
	"grep -A1 'name: ROWSHIFT_COORDINATOR_GRACE_MS' '$tmp/chart.yaml' | grep -q 'value: \"300000\"' &&
	 grep -q '^coordinatorGraceMs: 300000$' '$chart/values.yaml'"
render --set coordinatorGraceMs=600000 >"$tmp/grace.yaml" 2>&1
check "coordinatorGraceMs reaches the workers' ROWSHIFT_COORDINATOR_GRACE_MS" bash -c \
	"grep -A1 'name: ROWSHIFT_COORDINATOR_GRACE_MS' '$tmp/grace.yaml' | grep -q 'value: \"600000\"'"
sed 's/failureThreshold: 60$/failureThreshold: 12/' manifests/40-coordinator.yaml >"$tmp/short-startup.yaml"
check "a startup probe allowing less than 90 s (the Lease's wait, then the state) is caught" bash -c \
	"grep -q 'failureThreshold: 12' '$tmp/short-startup.yaml' && ! $js contract manifests/[0-35-6]*.yaml '$tmp/short-startup.yaml' 2>/dev/null"

# devices and transport
check "default: GPU workers on --device cuda, tcp, nvidia.com/gpu 1; the coordinator sees no GPU" \
	test "$($js devices "$tmp/chart.yaml")" = "worker: device=cuda transport=tcp gpus=nvidia.com/gpu=1 visible=-; coordinator: visible=void"
check "gpusPerWorker 0: CPU workers on --device cpu that see no GPU (NVIDIA_VISIBLE_DEVICES=void)" \
	test "$($js devices "$tmp/cpu.yaml")" = "worker: device=cpu transport=tcp gpus=none visible=void; coordinator: visible=void"
cat >"$tmp/gpu-values.yaml" <<'YAML'
gpusPerWorker: 1
transport: nccl
gpuResourceName: nvidia.com/mig-3g.40gb
worker:
  runtimeClassName: nvidia
  nodeSelector: {nvidia.com/gpu.present: "true"}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  resources:
    requests: {cpu: "4", memory: 16Gi}
    limits: {cpu: "4", memory: 16Gi}
YAML
check "GPU values (nccl, a MIG profile) pass helm lint --strict" lint_with -f "$tmp/gpu-values.yaml"
render -f "$tmp/gpu-values.yaml" >"$tmp/gpu.yaml" 2>&1
check "GPU values: every object valid against the Kubernetes schemas" $js schemas "$tmp/gpu.yaml"
check "GPU values: --device cuda --transport nccl, the MIG profile's limit, no nvidia.com/gpu" \
	test "$($js devices "$tmp/gpu.yaml")" = "worker: device=cuda transport=nccl gpus=nvidia.com/mig-3g.40gb=1 visible=-; coordinator: visible=void"
check "GPU values: Guaranteed QoS, non-root, the runtime class" bash -c \
	"$js qos '$tmp/gpu.yaml' >/dev/null && $js nonroot '$tmp/gpu.yaml' >/dev/null && grep -q 'runtimeClassName: \"nvidia\"' '$tmp/gpu.yaml'"
! render --set transport=nccl --set gpusPerWorker=0 >/dev/null 2>"$tmp/nccl-cpu.err"
check "transport nccl with gpusPerWorker 0 is refused by the schema" bash -c \
	"grep -q \"values don't meet the specifications of the schema\" '$tmp/nccl-cpu.err' && grep -q '/gpusPerWorker' '$tmp/nccl-cpu.err'"
check "... and by the chart itself (--skip-schema-validation)" bash -c \
	"! '$helm' template rowshift '$chart' --skip-schema-validation --set transport=nccl --set gpusPerWorker=0 2>&1 | grep -q 'kind: StatefulSet' &&
	 '$helm' template rowshift '$chart' --skip-schema-validation --set transport=nccl --set gpusPerWorker=0 2>&1 | grep -q 'transport nccl needs GPU workers'"
check "worker.device cuda with gpusPerWorker 0 is refused" bash -c \
	"'$helm' template rowshift '$chart' --set worker.device=cuda --set gpusPerWorker=0 2>&1 | grep -q 'needs gpusPerWorker > 0'"
check "the schema rejects an unknown transport" rejects transport=udp "/transport"
check "the schema rejects a gpuResourceName that is not an extended resource" rejects gpuResourceName=gpu "/gpuResourceName"

# metrics values: the ServiceMonitor
check "no ServiceMonitor by default" bash -c "! grep -q 'kind: ServiceMonitor' '$tmp/chart.yaml'"
cat >"$tmp/metrics-values.yaml" <<'YAML'
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: kube-prometheus-stack}
    interval: 30s
networkPolicy:
  coordinatorClients:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
YAML
check "metrics values (ServiceMonitor on) pass helm lint --strict" lint_with -f "$tmp/metrics-values.yaml"
render -f "$tmp/metrics-values.yaml" >"$tmp/metrics.yaml" 2>&1
check "metrics values: every object valid against the Kubernetes schemas (the ServiceMonitor, a CRD, named as not covered)" \
	bash -c "set -o pipefail; $js schemas '$tmp/metrics.yaml' | grep -q 'not covered: ServiceMonitor/'"
check "metrics values: a ServiceMonitor scraping /metrics on the coordinator's Service port" bash -c \
	"$js servicemonitor '$tmp/metrics.yaml' && grep -q 'release: kube-prometheus-stack' '$tmp/metrics.yaml' && grep -q 'interval: 30s' '$tmp/metrics.yaml'"
render -f "$tmp/metrics-values.yaml" --set tls.secretName=rowshift-tls --set statusToken=s3cret >"$tmp/metrics-tls.yaml" 2>&1
check "... over TLS with the status token: https, the workers' CA and the Service's name, the bearer token" \
	$js servicemonitor "$tmp/metrics-tls.yaml" --tls --token
check "a ServiceMonitor without the TLS settings is caught" bash -c "! $js servicemonitor '$tmp/metrics.yaml' --tls 2>/dev/null"
check "the schema rejects a serviceMonitor.interval that is not a duration" rejects metrics.serviceMonitor.interval=often "/metrics/serviceMonitor/interval"

# custom-image values: a digest
digest=sha256:$(printf %064d 0 | tr 0 a)
cat >"$tmp/image-values.yaml" <<YAML
image:
  repository: registry.example.com:5000/ml/rowshift
  digest: $digest
  pullPolicy: Always
imagePullSecrets: [{name: registry-pull}]
YAML
check "custom-image values (a digest) pass helm lint --strict" lint_with -f "$tmp/image-values.yaml"
render -f "$tmp/image-values.yaml" >"$tmp/image.yaml" 2>&1
check "custom-image values: every object valid against the Kubernetes schemas" $js schemas "$tmp/image.yaml"
check "image.digest: both pods run repository@sha256:... (not repository:sha256:...)" \
	$js image "$tmp/image.yaml" "registry.example.com:5000/ml/rowshift@$digest"
check "... and the image check catches another reference" bash -c "! $js image '$tmp/chart.yaml' 'registry.example.com:5000/ml/rowshift@$digest' 2>/dev/null"
check "custom-image values: the pull secret in both pods" bash -c "[ \"\$(grep -c 'name: registry-pull' '$tmp/image.yaml')\" = 2 ]"
check "the schema rejects a digest in image.tag" rejects "image.tag=$digest" "/image/tag"
check "the schema rejects a malformed image.digest" rejects image.digest=sha256:abc "/image/digest"

# the escape hatches, both pods
cat >"$tmp/hatches-values.json" <<'JSON'
{"coordinator": {
  "priorityClassName": "rowshift-control", "runtimeClassName": "gvisor",
  "nodeSelector": {"pool": "system"}, "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
  "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}],
  "podAnnotations": {"example.com/owner": "ml-platform", "prometheus.io/scrape": "false"}, "podLabels": {"team": "ml"},
  "extraEnv": [{"name": "TZ", "value": "UTC"}],
  "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
  "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": true}],
  "podSecurityContext": {"fsGroupChangePolicy": "OnRootMismatch"}, "securityContext": {"runAsUser": 20000}},
 "worker": {
  "priorityClassName": "rowshift-training", "runtimeClassName": "nvidia",
  "nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
  "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "worker"}}}}]}},
  "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
    {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"team": "ml"}}}],
  "podAnnotations": {"example.com/owner": "ml-platform"}, "podLabels": {"team": "ml"},
  "extraEnv": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
  "extraVolumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "criteo"}}],
  "extraVolumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
  "podSecurityContext": {"supplementalGroups": [2000]}, "securityContext": {"runAsUser": 20000}}}
JSON
check "escape-hatch values pass helm lint --strict" lint_with -f "$tmp/hatches-values.json"
render -f "$tmp/hatches-values.json" >"$tmp/hatches.yaml" 2>&1
check "both pods get their priorityClassName, runtimeClassName, scheduling, spread (with the component's selector), annotations, labels, extraEnv, extraVolumes, extraVolumeMounts and security contexts" \
	$js hatches "$tmp/hatches.yaml" "$tmp/hatches-values.json"
check "... and the hatches check catches a pod without them" bash -c "! $js hatches '$tmp/chart.yaml' '$tmp/hatches-values.json' 2>/dev/null"
check "... the rest of each pod's security context stays hardened (non-root, no escalation, capabilities dropped)" $js nonroot "$tmp/hatches.yaml"
render --set worker.securityContext.runAsUser=null --set worker.podSecurityContext.runAsUser=null --set worker.podSecurityContext.fsGroup=null >"$tmp/openshift.yaml" 2>&1
check "a security context key set to null is left out (runAsUser where the platform assigns uids)" bash -c \
	"[ \"\$(grep -c 'runAsUser: 10001' '$tmp/openshift.yaml')\" = 2 ] && grep -q 'runAsNonRoot: true' '$tmp/openshift.yaml'"
clash() { # clash SET WHAT: the chart refuses --set SET, saying WHAT
	! render --set "$1" >/dev/null 2>"$tmp/clash.err" && grep -q "$2" "$tmp/clash.err"
}
check "worker.extraEnv may not set a variable the chart sets (POD_NAME)" clash 'worker.extraEnv[0].name=POD_NAME' 'worker.extraEnv: name "POD_NAME" is already set by the chart'
check "coordinator.extraEnv may not set NVIDIA_VISIBLE_DEVICES" clash 'coordinator.extraEnv[0].name=NVIDIA_VISIBLE_DEVICES' 'coordinator.extraEnv: name "NVIDIA_VISIBLE_DEVICES"'
check "coordinator.extraEnv may not set ROWSHIFT_LEASE (the Role names the chart's)" clash 'coordinator.extraEnv[0].name=ROWSHIFT_LEASE' 'coordinator.extraEnv: name "ROWSHIFT_LEASE"'
check "worker.extraVolumes may not reuse a volume name (model)" clash 'worker.extraVolumes[0].name=model' 'worker.extraVolumes: name "model"'
check "worker.extraEnv may not set ROWSHIFT_READY_FILE (the readiness probe tests the chart's)" clash 'worker.extraEnv[0].name=ROWSHIFT_READY_FILE' 'worker.extraEnv: name "ROWSHIFT_READY_FILE"'
check "worker.extraVolumes may not reuse the ready file's volume name (run)" clash 'worker.extraVolumes[0].name=run' 'worker.extraVolumes: name "run"'
check "coordinator.extraVolumeMounts may not mount over /tmp" bash -c \
	"! '$helm' template rowshift '$chart' --set 'coordinator.extraVolumeMounts[0].name=x' --set 'coordinator.extraVolumeMounts[0].mountPath=/tmp' >/dev/null 2>'$tmp/clash2.err' && grep -q 'mountPath \"/tmp\"' '$tmp/clash2.err'"
check "the schema rejects podLabels that would change the selector (app.kubernetes.io/component)" \
	rejects 'worker.podLabels.app\.kubernetes\.io/component=x' "invalid propertyName 'app.kubernetes.io/component'"
check "the schema rejects an unknown key under worker" rejects worker.extraEnvs=x "extraEnvs"

# existingSecret: the user's Secret, none rendered
render --set existingSecret=my-token >"$tmp/existing.yaml" 2>&1
check "existingSecret: no Secret rendered, both pods read the token (and the optional status token) from it" \
	$js tokens "$tmp/existing.yaml" my-token
check "... and the tokens check catches the chart's own Secret" bash -c "! $js tokens '$tmp/chart.yaml' my-token 2>/dev/null"
check "the schema rejects existingSecret together with joinToken" bash -c \
	"! '$helm' template rowshift '$chart' --set existingSecret=my-token --set joinToken=$given >/dev/null 2>'$tmp/ex.err' && grep -q '/joinToken' '$tmp/ex.err'"
"$helm" install rowshift "$chart" --namespace rowshift --dry-run=client --set existingSecret=my-token >"$tmp/install-ex.out" 2>&1
check "NOTES.txt with existingSecret reads the token from it" grep -q "get secret my-token -o jsonpath='{.data.token}'" "$tmp/install-ex.out"
check "NOTES.txt says workers is the initial size and an upgrade keeps the size" bash -c \
	"grep -q 'only the size the StatefulSet was created with' '$tmp/install.out' && grep -q 'keeps the size it has then' '$tmp/install.out'"

# scale and Helm agree: against the API simulator, with the real helm and kubectl
sim_dir=$tmp/sim; mkdir -p "$sim_dir/nobin"
simtok=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
python3 tests/k8s/apisim.py --port 0 --port-file "$sim_dir/port" --token "$simtok" --tls-dir "$sim_dir/tls" \
	--kubeconfig-out "$sim_dir/kubeconfig" --root "$sim_dir/pods" --bin-dir "$sim_dir/nobin" --deployments store \
	>"$sim_dir/out" 2>"$sim_dir/err" & # sizes only: no coordinator pod
sim_pid=$!
wait_for "$sim_dir/port" . 30 >/dev/null || { echo "the API simulator did not start"; cat "$sim_dir/err"; }
hk() { KUBECONFIG=$sim_dir/kubeconfig KUBECACHEDIR=$sim_dir/cache timeout 60 "$@"; }
sts_replicas() { hk tools/bin/kubectl -n rowshift get statefulset rowshift-worker -o jsonpath='{.spec.replicas}'; }
# (the simulator serves no policy/v1 yet: the PodDisruptionBudget is left out here)
simvals=(--set podDisruptionBudget.enabled=false --set gpusPerWorker=0)
hk tools/bin/kubectl create namespace rowshift >/dev/null 2>&1
hk "$helm" install rowshift "$chart" -n rowshift "${simvals[@]}" --set workers=2 >"$sim_dir/install.out" 2>&1
check "helm install (against the simulator) creates the StatefulSet with workers (2)" test "$(sts_replicas)" = 2
hk tools/bin/kubectl -n rowshift scale statefulset/rowshift-worker --replicas=4 >/dev/null 2>&1
hk "$helm" upgrade rowshift "$chart" -n rowshift "${simvals[@]}" --set workers=3 >"$sim_dir/upgrade.out" 2>&1
check "helm upgrade after kubectl scale --replicas=4 keeps 4 (workers: 3 is only the initial size)" bash -c \
	"[ \"\$(KUBECONFIG=$sim_dir/kubeconfig KUBECACHEDIR=$sim_dir/cache tools/bin/kubectl -n rowshift get statefulset rowshift-worker -o jsonpath='{.spec.replicas}')\" = 4 ] &&
	 grep -q '^  replicas: 4$' <(KUBECONFIG=$sim_dir/kubeconfig '$helm' get manifest rowshift -n rowshift)"
check "the upgrade's NOTES say it kept the size" grep -q "this upgrade kept 4" "$sim_dir/upgrade.out"
check "helm template (no cluster) still renders workers" test "$($js replicas "$tmp/status.yaml")" = 5
kill "$sim_pid" 2>/dev/null; wait "$sim_pid" 2>/dev/null

same_version() { # the chart's appVersion is the version the binaries report
	local v
	v=$(sed -n 's/^#define RS_VERSION "\(.*\)"$/\1/p' common/version.h)
	[ -n "$v" ] && grep -qx "appVersion: \"$v\"" "$chart/Chart.yaml"
}
check "the chart's appVersion is the binaries' version (common/version.h)" same_version
check "k8s_manifests.mjs answered every request" test ! -e "$js_at.lost"

finish_checks k8s_manifests
