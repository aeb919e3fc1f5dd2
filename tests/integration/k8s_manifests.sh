#!/bin/bash
# k8s_manifests.sh - the Kubernetes deployment files, checked offline with the
# real helm (tools/bin) and the YAML checks of k8s_manifests.mjs (node, the
# pinned `yaml` package in tools/); no cluster, no container engine:
#   1. `helm lint --strict` passes; `helm template` renders the chart as
#      release `rowshift` in namespace `rowshift`;
#   2. the rendered chart and manifests/*.yaml define the same objects and
#      agree on every field (labels naming the tool, the image tag, the
#      Secret's value and the model config's formatting aside); a changed
#      manifest is caught;
#   3. both hold the contract the coordinator's Kubernetes mode is written
#      against (names, args, env, ports, probes, volumes, selectors, labels),
#      carry examples/dlrm-small.json as the model, give the coordinator
#      exactly its Role (a widened Role is caught), and run nothing as root;
#   4. values.schema.json refuses bad values (negative workers, a non-integer
#      gpusPerWorker, ...); a set joinToken is rendered into the Secret, an
#      empty one is generated; gpusPerWorker 0 removes the GPU limit;
#      statusToken, modelJson and another release name render as documented;
#      the kubectl commands manifests/ documents (secret, model) make what
#      the pods read;
#   5. NOTES.txt says how to watch, scale and get the token; the Dockerfile
#      and .dockerignore have what the manifests rely on.
set -u
. "$(dirname "$0")/../lib/itest.sh"
helm=tools/bin/helm
chart=helm/rowshift
js="node tests/integration/k8s_manifests.mjs"
[ -x "$helm" ] || { echo "FAILED: $helm is missing (make tools)"; exit 1; }
[ -f tools/node_modules/yaml/package.json ] || { echo "FAILED: the yaml package is not installed (make tools)"; exit 1; }
manifests=(manifests/*.yaml)
render() { "$helm" template rowshift "$chart" --namespace rowshift "$@"; }

# 1. lint and render
check "helm lint --strict passes" bash -c "'$helm' lint --strict '$chart' >'$tmp/lint.out' 2>&1 || { cat '$tmp/lint.out'; false; }"
check "helm template renders the chart" bash -c "'$helm' template rowshift '$chart' --namespace rowshift >'$tmp/chart.yaml' 2>'$tmp/render.err' || { cat '$tmp/render.err'; false; }"

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
check "the chart's Role grants exactly pods get/list/watch, configmaps get/create/update, events create" $js rbac "$tmp/chart.yaml"
check "the manifests' Role grants exactly the same" $js rbac "${manifests[@]}"
sed 's/verbs: \["get", "list", "watch"\]/verbs: ["get", "list", "watch", "delete"]/' manifests/10-rbac.yaml >"$tmp/wide-rbac.yaml"
printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: extra}\nrules: [{apiGroups: ["*"], resources: ["secrets"], verbs: ["*"]}]\n' >>"$tmp/wide-rbac.yaml"
check "a wider Role (pods delete, a ClusterRole on secrets) is caught" bash -c "! $js rbac '$tmp/wide-rbac.yaml' 2>/dev/null"
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
check "without tls.secretName nothing of TLS is rendered" bash -c "! grep -qi 'tls' '$tmp/chart.yaml'"
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
check "the schema rejects a tls.secretName that is not a Secret's name" rejects 'tls.secretName=Bad_Name' "/tls/secretName"
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
check "NOTES.txt: port-forward, the dashboard, rowshiftctl status --watch, kubectl scale, the token" bash -c "
	grep -q 'kubectl --namespace rowshift port-forward svc/rowshift-coordinator 7070' '$tmp/install.out' &&
	grep -q 'http://localhost:7070/' '$tmp/install.out' &&
	grep -q 'rowshiftctl status --watch --coordinator ws://localhost:7070' '$tmp/install.out' &&
	grep -q 'scale statefulset/rowshift-worker --replicas=N' '$tmp/install.out' &&
	grep -q 'get secret rowshift-join-token' '$tmp/install.out'"
check "the Dockerfile installs the three binaries and runs as uid 10001" bash -c "
	grep -q '^USER 10001' Dockerfile &&
	for b in rowshift-coordinator rowshift-worker rowshiftctl; do grep -q \"build/bin/\$b\" Dockerfile || exit 1; done &&
	grep -q '/usr/local/bin/' Dockerfile && grep -q '^FROM .*runtime' Dockerfile"
check ".dockerignore leaves out build/, tools/, node_modules and .git" bash -c "
	for p in build tools node_modules .git; do grep -qx \"/\\?\$p/\\?\" .dockerignore || exit 1; done"

finish_checks k8s_manifests
