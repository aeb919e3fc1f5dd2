#!/bin/bash
# k8s_sim.sh - the Kubernetes API simulator (tests/k8s/apisim.py) itself,
# with the real kubectl (tools/bin) and curl, over TLS with a bearer token:
#   1. `kubectl apply` of a namespace, a ConfigMap, a Secret (stringData) and
#      a Parallel StatefulSet of 3 whose shell container prints an env from
#      the Secret and a file from the ConfigMap volume; `kubectl get pods`
#      (Table output) shows 3 pods Running and Ready, each on its own
#      loopback address; `kubectl logs` shows the values; applying again
#      says "unchanged", a changed ConfigMap "configured" and reaches the pod;
#   2. `kubectl scale --replicas=1` removes ordinals 2 and 1, whose processes
#      got SIGTERM (the kubelet's record, /_sim/pods) and ran their trap,
#      and whose emptyDirs went with them; `kubectl delete pod` of a running
#      pod returns once it is gone, and the controller makes it again; a pod
#      ignoring SIGTERM is SIGKILLed when its grace period ends; `kubectl
#      create secret` (a protobuf body) works; a pod whose exec readiness
#      probe tests a file in its emptyDir (the env naming it rewritten to
#      the pod's own directory) is Running but not Ready (0/1) until the
#      file appears, then Ready (1/1), and not Ready once it is removed,
#      each change a MODIFIED event on a watch;
#   3. watches with curl: from an old resourceVersion after /_sim/compact,
#      the 410 Expired ERROR event; with allowWatchBookmarks, a BOOKMARK and a
#      clean end at timeoutSeconds; /_sim/drop-watches cuts an open watch;
#   4. coordination.k8s.io leases: kubectl apply, get (Table with HOLDER),
#      get -o yaml, delete, discovery; a PUT with a stale resourceVersion is
#      409 Conflict. Size limits: a ConfigMap over 1 MiB of data is 422 Invalid
#      ("[]: Too long: must have at most 1048576 bytes") on create and patch,
#      exactly 1 MiB is fine; a body over 3 MiB is 413. Schemas: a value of
#      the wrong type is 400 ("cannot unmarshal"; kubectl apply too), a value
#      outside an enum or a missing required field 422 Invalid. RBAC: a service
#      account's token (--sa-token, --sa-kubeconfig-out) gets what its Role
#      grants (get by resourceNames, patch of statefulsets/scale, leases) and
#      a ClusterRoleBinding to its group grants, and the real 403 Forbidden
#      Status for the rest (list, other names, statefulsets/status, another
#      namespace, /_sim/); the token of a missing service account is 401;
#      in-cluster: a Deployment (Recreate) makes a ReplicaSet and its pod,
#      which reads the API with its ServiceAccount's token at the standard
#      path (its Role allows a ConfigMap, refuses secrets) and serves on
#      0.0.0.0 behind a Service whose asked-for clusterIP forwards to its
#      named port (80 to 8080); bad and taken clusterIPs are 422; a deleted pod is
#      replaced; rollout restart recreates it once the old pod is gone;
#   4c. the Eviction API: a PodDisruptionBudget (maxUnavailable: 1) over a
#      StatefulSet of 2 whose pods are Ready when the test says: `kubectl
#      get pdb` ALLOWED DISRUPTIONS 1; `kubectl drain` (a pod selector)
#      cordons the node and evicts one pod (SIGTERM); while its replacement
#      is not Ready the budget allows 0 and an eviction of the other is 429
#      TooManyRequests with the real message and cause; the unready pod may
#      be evicted; a pod two budgets cover is 500;
#   5. /_sim/unreachable?seconds=2: kubectl fails, then works again, and the
#      pods ran on meanwhile; no token is 401, no CA fails TLS verification;
#   6. SIGTERM to the simulator ends every process its kubelet started.
# APISIM=FILE runs another copy of the simulator (to check that checks fail).
set -u
. "$(dirname "$0")/../lib/itest.sh"
kubectl=tools/bin/kubectl
[ -x "$kubectl" ] || { echo "FAILED: $kubectl is missing (make tools)"; exit 1; }
tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
satok=sa-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
ghosttok=ghost-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

python3 "${APISIM:-tests/k8s/apisim.py}" --port 0 --port-file "$tmp/port" --token "$tok" --tls-dir "$tmp/tls" \
	--kubeconfig-out "$tmp/kubeconfig" --root "$tmp/pods" --bin-dir "" --bookmark-interval 0.5 \
	--sa-token "rbac/runner=$satok" --sa-token "rbac/ghost=$ghosttok" --sa-kubeconfig-out "rbac/runner=$tmp/sa.kubeconfig" \
	>"$tmp/sim.out" 2>"$tmp/sim.err" &
sim=$!
wait_for "$tmp/port" . 20 || { echo "FAILED: the simulator did not start"; cat "$tmp/sim.err"; exit 1; }
port=$(cat "$tmp/port")
url=https://127.0.0.1:$port
export KUBECONFIG=$tmp/kubeconfig KUBECACHEDIR=$tmp/kube-cache
k() { timeout 20 "$kubectl" -n simtest "$@"; }
api() { curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $tok" "$@"; }
records() { api "$url/_sim/pods"; } # what the kubelet did, removed pods included
until_true() { # until_true SECONDS COMMAND...: bounded polling
	local n=$(($1 * 5)); shift
	for _ in $(seq 1 $n); do "$@" 2>/dev/null && return 0; sleep 0.2; done
	"$@"
}

# 1. apply, run, log, apply again
manifest() { # manifest GREETING
	cat <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: simtest
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: simtest
data:
  greeting.txt: $1
---
apiVersion: v1
kind: Secret
metadata:
  name: app-secret
  namespace: simtest
stringData:
  password: s3cr3t-value
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: simtest
spec:
  serviceName: web
  replicas: 3
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: main
        image: busybox:1.36
        command: ["/bin/sh", "-c"]
        args:
        - |
          echo "password=\$PASSWORD"
          echo "greeting=\$(cat "\$GREETING_FILE")"
          echo "pod=\$POD_NAME ip=\$POD_IP"
          trap 'echo "got SIGTERM"; echo "\$POD_NAME" >"\$SCRATCH/terminated"; exit 0' TERM
          while :; do sleep 0.1; done
        env:
        - name: PASSWORD
          valueFrom:
            secretKeyRef: {name: app-secret, key: password}
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: GREETING_FILE, value: /etc/app/greeting.txt}
        - {name: SCRATCH, value: /scratch}
        readinessProbe:
          exec:
            command: ["/bin/sh", "-c", "test -n \"\$POD_IP\""]
          periodSeconds: 1
        volumeMounts:
        - {name: config, mountPath: /etc/app}
        - {name: scratch, mountPath: /scratch}
      volumes:
      - name: config
        configMap: {name: app-config}
      - name: scratch
        emptyDir: {}
EOF
}
manifest hello-v1 >"$tmp/app.yaml"
manifest hello-v2 >"$tmp/app2.yaml"
k apply -f "$tmp/app.yaml" >"$tmp/apply1.out" 2>&1
check "kubectl apply (--validate=strict) creates the 4 objects" test "$(grep -c ' created$' "$tmp/apply1.out")" = 4
running() { # running "NAMES ": kubectl get pods (a Table) shows exactly these, each 1/1 Running
	local got
	got=$(k get pods --no-headers | awk '$2 == "1/1" && $3 == "Running" { print $1 }' | sort | tr '\n' ' ')
	[ "$got" = "$1" ] && [ "$(k get pods --no-headers | wc -l)" = "$(echo $1 | wc -w)" ]
}
check "kubectl get pods: web-0, web-1, web-2 Running and Ready (1/1)" until_true 20 running "web-0 web-1 web-2 "
k get pods -o wide >"$tmp/wide.out"
ips() { awk '$6 ~ /^127\.0\.1\.[0-9]+$/ && $7 == "sim-node" { print $6 }' "$tmp/wide.out" | sort -u | wc -l; }
check "kubectl get pods -o wide: each pod on its own 127.0.1.x address, on sim-node" test "$(ips)" = 3
k get sts >"$tmp/sts.out"
check "kubectl get sts: READY 3/3" grep -q '^web  *3/3 ' "$tmp/sts.out"
k get events >"$tmp/events.out"
check "kubectl get events: the controller's SuccessfulCreate for each pod" \
	test "$(grep -c 'SuccessfulCreate *statefulset/web *create Pod web-[0-2] ' "$tmp/events.out")" = 3
logs_ok() {
	k logs web-1 >"$tmp/web1.log" && grep -qx "password=s3cr3t-value" "$tmp/web1.log" &&
		grep -qx "greeting=hello-v1" "$tmp/web1.log" && grep -q "^pod=web-1 ip=127\.0\.1\.[0-9]*$" "$tmp/web1.log"
}
check "kubectl logs: the Secret's env, the ConfigMap volume's file, the pod's name and IP" until_true 5 logs_ok
k apply -f "$tmp/app.yaml" >"$tmp/apply2.out" 2>&1
applied() { grep -qx "configmap/app-config $2" "$1" && grep -qx "statefulset.apps/web unchanged" "$1"; }
check "applying again: the ConfigMap and the StatefulSet are unchanged" applied "$tmp/apply2.out" unchanged
k apply -f "$tmp/app2.yaml" >"$tmp/apply3.out" 2>&1
check "applying a changed ConfigMap: configured, the StatefulSet still unchanged" applied "$tmp/apply3.out" configured
check "the change reaches the running pod's configMap volume" until_true 10 \
	grep -qx hello-v2 "$tmp/pods/simtest/web-0/volumes/config/greeting.txt"

# 2. scale down, delete a pod
k scale statefulset/web --replicas=1 >/dev/null
check "kubectl scale --replicas=1: only web-0 is left" until_true 20 running "web-0 "
sigterm_ok() { # the removed pods' processes got SIGTERM only, exited 0 and ran their trap
	records | python3 -c '
import json, sys
recs = {r["name"]: r for r in json.load(sys.stdin) if r["namespace"] == "simtest"}
for n in ("web-1", "web-2"):
    r = recs[n]
    assert r["removed"] and r["signals"] == ["SIGTERM"] and r["exit_codes"] == [0], r
assert not recs["web-0"]["removed"] and not recs["web-0"]["signals"], recs["web-0"]'
}
check "ordinals 2 and 1 got SIGTERM, exited 0 and are gone (/_sim/pods)" sigterm_ok
trapped() { grep -qx 'got SIGTERM' "$tmp/pods/simtest/web-2/main.log" && grep -qx 'got SIGTERM' "$tmp/pods/simtest/web-1/main.log" &&
	[ ! -e "$tmp/pods/simtest/web-1/volumes/scratch" ] && [ -d "$tmp/pods/simtest/web-1/volumes/config" ]; }
check "their trap ran ('got SIGTERM' logged); their emptyDir went with them" trapped
uid0=$(k get pod web-0 -o jsonpath='{.metadata.uid}')
k delete pod web-0 >"$tmp/delete.out" 2>&1
gone_on_return() { # kubectl returned only once the kubelet had removed that pod (uid $uid0)
	grep -q 'pod "web-0" deleted' "$tmp/delete.out" && records | python3 -c '
import json, sys
r = [r for r in json.load(sys.stdin) if r["uid"] == sys.argv[1]]
assert r and r[0]["removed"], r' "$uid0"
}
check "kubectl delete pod web-0 returns once it is gone ($(cat "$tmp/delete.out"))" gone_on_return
recreated() { local u; u=$(k get pod web-0 -o jsonpath='{.metadata.uid}') && [ -n "$u" ] && [ "$u" != "$uid0" ] && running "web-0 "; }
check "the controller makes web-0 again (a new uid), Running" until_true 20 recreated
replaced() {
	records | python3 -c '
import json, sys
w0 = [r for r in json.load(sys.stdin) if r["name"] == "web-0"]
assert len(w0) == 2 and w0[0]["signals"] == ["SIGTERM"] and w0[0]["removed"] and not w0[1]["removed"], w0'
}
check "the deleted web-0 got SIGTERM; the new one runs" replaced
cat >"$tmp/stubborn.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: stubborn, namespace: simtest}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: busybox, command: ["/bin/sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.1; done"]}
EOF
k apply -f "$tmp/stubborn.yaml" >/dev/null
wait_for "$tmp/pods/simtest/stubborn/c.log" up 10
k delete pod stubborn >/dev/null 2>&1
killed() {
	records | python3 -c '
import json, sys
r = [r for r in json.load(sys.stdin) if r["name"] == "stubborn"][0]
assert r["removed"] and r["signals"] == ["SIGTERM", "SIGKILL"] and r["exit_codes"] == [137], r'
}
check "a pod ignoring SIGTERM: SIGKILL when its 1 s grace period ends (exit 137), then gone" killed
k create secret generic made-by-create --from-literal=key=v4lue >/dev/null 2>&1
check "kubectl create secret (a protobuf request body) stores the base64 data" \
	test "$(k get secret made-by-create -o jsonpath='{.data.key}' | base64 -d)" = v4lue

# readiness from an exec probe that tests a file in the pod's emptyDir (as the worker's ready file)
cat >"$tmp/probed.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: probed, namespace: simtest}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; echo \"ready file: $READY_FILE\"; while :; do sleep 0.1; done"]
    env:
    - {name: READY_FILE, value: /run/probe/ready}
    readinessProbe:
      exec:
        command: ["test", "-e", "/run/probe/ready"]
      periodSeconds: 1
      failureThreshold: 1
      successThreshold: 1
    volumeMounts:
    - {name: run, mountPath: /run/probe}
  volumes:
  - name: run
    emptyDir: {medium: Memory, sizeLimit: 1Mi}
EOF
probe_rv=$(api "$url/api/v1/namespaces/simtest/pods" | python3 -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
curl -sSN --max-time 60 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $tok" \
	"$url/api/v1/namespaces/simtest/pods?watch=1&fieldSelector=metadata.name%3Dprobed&resourceVersion=$probe_rv" \
	>"$tmp/probe-watch.json" 2>/dev/null &
probe_watch=$!
k apply -f "$tmp/probed.yaml" >/dev/null
ready_file=$tmp/pods/simtest/probed/volumes/run/ready
wait_for "$tmp/pods/simtest/probed/c.log" "ready file:" 10
check "the container's /run/probe is its own emptyDir in the pod's sandbox (env rewritten: $(grep -m1 'ready file:' "$tmp/pods/simtest/probed/c.log"))" \
	grep -qxF "ready file: $ready_file" "$tmp/pods/simtest/probed/c.log"
readiness() { # readiness True|False: the pod's Ready and ContainersReady, the container's ready, kubectl's READY
	local want=0/1
	[ "$1" = True ] && want=1/1
	k get pod probed -o json | python3 -c '
import json, sys
p, want = json.load(sys.stdin), sys.argv[1]
cond = {c["type"]: c["status"] for c in p["status"]["conditions"]}
assert p["status"]["phase"] == "Running", p["status"]["phase"]
assert cond["Ready"] == want and cond["ContainersReady"] == want, cond
assert p["status"]["containerStatuses"][0]["ready"] == (want == "True"), p["status"]["containerStatuses"]' "$1" &&
		[ "$(k get pod probed --no-headers | awk '{ print $2, $3 }')" = "$want Running" ]
}
sleep 1.5 # a probe or two failed
check "Running, but not Ready while the probe's file is missing (READY 0/1; Ready, ContainersReady False)" readiness False
touch "$ready_file"
check "Ready once the file appears in its emptyDir (READY 1/1)" until_true 5 readiness True
rm -f "$ready_file"
check "not Ready again once it is removed (failureThreshold 1)" until_true 5 readiness False
kill $probe_watch 2>/dev/null
wait $probe_watch 2>/dev/null
check "each change of readiness was a MODIFIED event on the watch: Ready False, True, False" python3 - "$tmp/probe-watch.json" <<'PY'
import json, sys
seen = []
for line in open(sys.argv[1]):
    try:
        ev = json.loads(line)
    except ValueError:  # the last line, cut when the watch was stopped
        continue
    ready = {c["type"]: c["status"] for c in ev["object"].get("status", {}).get("conditions") or []}.get("Ready")
    if ready and (not seen or seen[-1][1] != ready):
        seen.append((ev["type"], ready))
assert [r for _, r in seen] == ["False", "True", "False"], seen
assert all(t == "MODIFIED" for t, _ in seen[1:]), seen
PY
k delete pod probed >/dev/null 2>&1
emptydir_gone() { [ ! -e "$tmp/pods/simtest/probed/volumes/run" ] && [ -s "$tmp/pods/simtest/probed/c.log" ]; }
check "the emptyDir is removed with the pod (its log stays)" until_true 5 emptydir_gone
# 3. watches: 410 after compaction, bookmarks, dropped
rv=$(api "$url/api/v1/namespaces/simtest/pods" | python3 -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
k label pod web-0 touched=yes >/dev/null # history after $rv ...
api -X POST "$url/_sim/compact" >/dev/null # ... forgotten
api -N "$url/api/v1/namespaces/simtest/pods?watch=1&resourceVersion=$rv" >"$tmp/expired.out" 2>&1
check "a watch from resourceVersion $rv after /_sim/compact: the 410 Expired ERROR event" python3 -c "
import json
ev = [json.loads(l) for l in open('$tmp/expired.out')]
assert len(ev) == 1 and ev[0]['type'] == 'ERROR', ev
o = ev[0]['object']
assert o['kind'] == 'Status' and o['code'] == 410 and o['reason'] == 'Expired', o
assert o['message'].startswith('too old resource version: $rv ('), o"
rv=$(api "$url/api/v1/namespaces/simtest/pods" | python3 -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
api -N "$url/api/v1/namespaces/simtest/pods?watch=1&resourceVersion=$rv&allowWatchBookmarks=true&timeoutSeconds=2" \
	>"$tmp/bookmark.out" 2>&1
bmrc=$?
check "a watch with allowWatchBookmarks gets a BOOKMARK and ends cleanly at timeoutSeconds (curl exit $bmrc)" python3 -c "
import json
assert $bmrc == 0
ev = [json.loads(l) for l in open('$tmp/bookmark.out')]
bm = [e for e in ev if e['type'] == 'BOOKMARK']
assert bm and bm[0]['object']['kind'] == 'Pod' and int(bm[0]['object']['metadata']['resourceVersion']) >= $rv, ev"
api -N "$url/api/v1/namespaces/simtest/pods?watch=1" >"$tmp/dropped.out" 2>"$tmp/dropped.err" &
watcher=$!
wait_for "$tmp/dropped.out" '"ADDED"' 10
api -X POST "$url/_sim/drop-watches" >"$tmp/drop.json"
cut() { ! kill -0 $watcher 2>/dev/null && grep -q 'outstanding read data' "$tmp/dropped.err"; }
check "/_sim/drop-watches answers how many it cut ($(cat "$tmp/drop.json"))" grep -q '"dropped": *[1-9]' "$tmp/drop.json"
check "the open watch is cut mid-stream (curl: transfer closed with outstanding read data)" until_true 5 cut
kill $watcher 2>/dev/null; wait $watcher 2>/dev/null

# (for 4c, made now so that its pods are Ready by then) a PodDisruptionBudget (maxUnavailable: 1) over a
# StatefulSet of 2 whose pods are Ready once a file named by their uid is in $tmp/gate
mkdir -p "$tmp/gate"
cat >"$tmp/evict.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: evict}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: gated, namespace: evict}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: gated}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: gated, namespace: evict}
spec:
  replicas: 2
  podManagementPolicy: Parallel
  serviceName: gated
  selector: {matchLabels: {app: gated}}
  template:
    metadata: {labels: {app: gated}}
    spec:
      containers:
      - name: c
        image: busybox
        command: [sleep, "300"]
        env: [{name: GATE, value: "$tmp/gate"}, {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}]
        readinessProbe: {exec: {command: [sh, -c, 'test -e "\$GATE/\$UID"']}, periodSeconds: 1}
YAML
ke() { timeout 20 "$kubectl" -n evict "$@"; }
uid_of() { ke get pod "$1" -o jsonpath='{.metadata.uid}'; }
gate() { local u; u=$(uid_of "$1") && [ -n "$u" ] && touch "$tmp/gate/$u"; } # gate POD: make it Ready
pdb_allows() { [ "$(ke get pdb gated --no-headers | awk '{print $2, $3, $4}')" = "N/A 1 $1" ]; }
evict() { # evict NAME POD: POST its Eviction; the answer in $tmp/NAME.json and .code
	as "$tok" "$1" -X POST -H 'Content-Type: application/json' "$url/api/v1/namespaces/evict/pods/$2/eviction" \
		-d "{\"apiVersion\": \"policy/v1\", \"kind\": \"Eviction\", \"metadata\": {\"name\": \"$2\", \"namespace\": \"evict\"}}"
}
phase_of() { ke get pod "$1" -o jsonpath='{.status.phase}'; }
timeout 20 "$kubectl" apply -f "$tmp/evict.yaml" >/dev/null
until_true 10 gate gated-0
until_true 10 gate gated-1

# 4. leases; object size limits; RBAC for a service account's token
as() { # as TOKEN NAME CURL-ARGS...: the answer's body in $tmp/NAME.json, its HTTP code in $tmp/NAME.code
	local t=$1 n=$2; shift 2
	curl -sS --max-time 20 --cacert "$tmp/tls/ca.crt" -H "Authorization: Bearer $t" -o "$tmp/$n.json" \
		-w '%{http_code}' "$@" >"$tmp/$n.code"
}
answered() { # answered NAME CODE [REASON MESSAGE [DETAILS-JSON]]: that answer, a Status when REASON is given
	python3 - "$tmp/$1" "${@:2}" <<'PY'
import json, sys
f, code = sys.argv[1], sys.argv[2]
got = open(f + ".code").read()
assert got == code, "HTTP %s, not %s: %s" % (got, code, open(f + ".json").read()[:400])
if len(sys.argv) > 3:
    s = json.load(open(f + ".json"))
    want = ("Status", "Failure", int(code), sys.argv[3], sys.argv[4])
    assert (s.get("kind"), s.get("status"), s.get("code"), s.get("reason"), s.get("message")) == want, s
    if len(sys.argv) > 5:
        assert s.get("details") == json.loads(sys.argv[5]), s.get("details")
PY
}
lease_url=$url/apis/coordination.k8s.io/v1/namespaces/simtest/leases
cat >"$tmp/lease.yaml" <<'YAML'
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: leader, namespace: simtest}
spec: {holderIdentity: holder-a, leaseDurationSeconds: 15}
YAML
k apply -f "$tmp/lease.yaml" >"$tmp/lease-apply.out" 2>&1
check "kubectl apply of a Lease: created ($(cat "$tmp/lease-apply.out"))" \
	grep -qx 'lease.coordination.k8s.io/leader created' "$tmp/lease-apply.out"
check "kubectl get leases: NAME HOLDER AGE, leader held by holder-a" \
	test "$(k get leases | awk '{print $1, $2}' | tr '\n' ' ')" = "NAME HOLDER leader holder-a "
k get lease leader -o yaml >"$tmp/lease.out"
check "kubectl get lease leader -o yaml" grep -qx 'kind: Lease' "$tmp/lease.out"
api "$lease_url/leader" >"$tmp/lease.json"
put_lease() { # put_lease NAME HOLDER: PUT the lease read into $tmp/lease.json, with its resourceVersion
	python3 -c "import json; o = json.load(open('$tmp/lease.json')); o['spec']['holderIdentity'] = '$2'; print(json.dumps(o))" \
		>"$tmp/$1.body" &&
		as "$tok" "$1" -X PUT -H 'Content-Type: application/json' --data-binary @"$tmp/$1.body" "$lease_url/leader"
}
put_lease lease-put1 holder-b
check "a PUT of the Lease with its current resourceVersion: 200" answered lease-put1 200
put_lease lease-put2 holder-c
check "a PUT with that (now stale) resourceVersion: 409 Conflict" answered lease-put2 409 Conflict \
	'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has been modified; please apply your changes to the latest version and try again' \
	'{"name": "leader", "group": "coordination.k8s.io", "kind": "leases"}'
check "the Lease is holder-b's" test "$(k get lease leader -o jsonpath='{.spec.holderIdentity}')" = holder-b
k delete lease leader >/dev/null 2>&1
as "$tok" lease-gone "$lease_url/leader"
check "kubectl delete lease: then 404" answered lease-gone 404 NotFound 'leases.coordination.k8s.io "leader" not found'
k api-resources --api-group=coordination.k8s.io >"$tmp/lease-discovery.out" 2>&1
check "discovery: kubectl api-resources lists leases in coordination.k8s.io/v1" \
	grep -q '^leases  *coordination.k8s.io/v1  *true  *Lease$' "$tmp/lease-discovery.out"

cm_url=$url/api/v1/namespaces/simtest/configmaps
cm_body() { # cm_body NAME BYTES: a ConfigMap with BYTES bytes of data values (keys do not count)
	python3 -c "import json; print(json.dumps({'metadata': {'name': '$1'}, 'data': {'a': 'x' * ($2 - 5), 'b': 'y' * 5}}))" \
		>"$tmp/$1.body"
}
too_long='ConfigMap "NAME" is invalid: []: Too long: must have at most 1048576 bytes'
too_long_details='{"name": "NAME", "kind": "ConfigMap", "causes": [{"reason": "FieldValueTooLong", "message": "Too long: must have at most 1048576 bytes", "field": "[]"}]}'
cm_body big 1048577
as "$tok" cm-big -H 'Content-Type: application/json' --data-binary @"$tmp/big.body" "$cm_url"
check "a ConfigMap with 1 MiB + 1 byte of data: 422 Invalid, []: Too long" \
	answered cm-big 422 Invalid "${too_long/NAME/big}" "${too_long_details/NAME/big}"
cm_body edge 1048576
as "$tok" cm-edge -H 'Content-Type: application/json' --data-binary @"$tmp/edge.body" "$cm_url"
check "one of exactly 1 MiB: created" answered cm-edge 201
as "$tok" cm-grow -X PATCH -H 'Content-Type: application/merge-patch+json' -d '{"data": {"c": "z"}}' "$cm_url/edge"
check "a patch making it 1 byte bigger: 422 Invalid" answered cm-grow 422 Invalid "${too_long/NAME/edge}"
k create configmap big2 --from-file=big.txt="$tmp/big.body" >"$tmp/cm-kubectl.out" 2>&1
check "kubectl create configmap of a 1 MiB+ file: the server's message ($(cut -c 1-120 "$tmp/cm-kubectl.out"))" \
	grep -qF 'ConfigMap "big2" is invalid: []: Too long: must have at most 1048576 bytes' "$tmp/cm-kubectl.out"
cm_body huge $((3 * 1024 * 1024))
as "$tok" cm-huge -H 'Content-Type: application/json' --data-binary @"$tmp/huge.body" "$cm_url"
check "a request body over 3 MiB: 413 RequestEntityTooLarge" \
	answered cm-huge 413 RequestEntityTooLarge "Request entity too large: limit is 3145728"

# schemas (kubernetes-models): what a real server's decoding or validation refuses
as "$tok" cm-int -H 'Content-Type: application/json' -d '{"metadata": {"name": "int"}, "data": {"a": 1}}' "$cm_url"
check "a ConfigMap whose data value is a number: 400 BadRequest, cannot unmarshal" answered cm-int 400 BadRequest \
	'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field .data.a of type string'
cat >"$tmp/badport.yaml" <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: badport}
spec:
  serviceName: badport
  selector: {matchLabels: {app: badport}}
  template:
    metadata: {labels: {app: badport}}
    spec:
      containers: [{name: c, image: busybox, command: [sleep, "60"], ports: [{containerPort: "80"}]}]
YAML
k apply -f "$tmp/badport.yaml" >"$tmp/badport.out" 2>&1
check "kubectl apply of a StatefulSet whose containerPort is a string: refused, naming the field ($(head -c 160 "$tmp/badport.out"))" \
	bash -c "grep -q 'cannot unmarshal string into Go struct field .spec.template.spec.containers.ports.containerPort of type integer' '$tmp/badport.out' &&
		 ! k get statefulset badport >/dev/null 2>&1"
sed 's/ports: \[{containerPort: "80"}\]/imagePullPolicy: Sometimes/' "$tmp/badport.yaml" >"$tmp/badpolicy.yaml"
k apply -f "$tmp/badpolicy.yaml" >"$tmp/badpolicy.out" 2>&1
check "an imagePullPolicy outside its enum: 422 Invalid, the field, the value and the values it may take" \
	grep -qF 'The StatefulSet "badport" is invalid: spec.template.spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"' "$tmp/badpolicy.out"
as "$tok" sts-noselector -H 'Content-Type: application/json' -d '{"metadata": {"name": "nosel"}, "spec": {"template": {}}}' \
	"$url/apis/apps/v1/namespaces/simtest/statefulsets"
check "a StatefulSet without a selector: 422 Invalid, spec.selector: Required value" \
	answered sts-noselector 422 Invalid 'StatefulSet.apps "nosel" is invalid: [spec.selector: Required value, spec.template.spec.containers: Required value]'

cat >"$tmp/rbac.yaml" <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: rbac}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: rbac}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: visible, namespace: rbac}
data: {k: shown}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hidden, namespace: rbac}
data: {k: secret}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: idle, namespace: rbac}
spec:
  replicas: 0
  serviceName: idle
  selector: {matchLabels: {app: idle}}
  template:
    metadata: {labels: {app: idle}}
    spec:
      containers: [{name: c, image: busybox, command: [sleep, "120"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: runner, namespace: rbac}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list], resourceNames: [visible]}
- {apiGroups: [apps], resources: [statefulsets/scale], verbs: [get, patch]}
- {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create, get, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: runner, namespace: rbac}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: runner}
subjects: [{kind: ServiceAccount, name: runner}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ns-reader}
rules: [{apiGroups: [""], resources: [namespaces], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: rbac-sas-read-ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ns-reader}
subjects: [{kind: Group, name: "system:serviceaccounts:rbac", apiGroup: rbac.authorization.k8s.io}]
YAML
timeout 20 "$kubectl" apply -f "$tmp/rbac.yaml" >/dev/null
sak() { KUBECONFIG=$tmp/sa.kubeconfig timeout 20 "$kubectl" "$@"; } # as system:serviceaccount:rbac:runner
user='User "system:serviceaccount:rbac:runner"'
check "the SA's kubeconfig: kubectl get configmap visible (resourceNames: [visible] on get)" \
	test "$(sak get configmap visible -o jsonpath='{.data.k}')" = shown
sak get configmap hidden >"$tmp/sa-hidden.out" 2>&1
check "kubectl get configmap hidden as the SA: Forbidden ($(cat "$tmp/sa-hidden.out"))" grep -qxF \
	"Error from server (Forbidden): configmaps \"hidden\" is forbidden: $user cannot get resource \"configmaps\" in API group \"\" in the namespace \"rbac\"" \
	"$tmp/sa-hidden.out"
as "$satok" sa-list "$url/api/v1/namespaces/rbac/configmaps"
check "a list of configmaps as the SA: 403, resourceNames do not grant a list" answered sa-list 403 Forbidden \
	"configmaps is forbidden: $user cannot list resource \"configmaps\" in API group \"\" in the namespace \"rbac\"" \
	'{"kind": "configmaps"}'
as "$satok" sa-list-one "$url/api/v1/namespaces/rbac/configmaps?fieldSelector=metadata.name%3Dvisible"
check "... unless a fieldSelector names the one allowed" answered sa-list-one 200
as "$satok" sa-scale -X PATCH -H 'Content-Type: application/merge-patch+json' -d '{"spec": {"replicas": 1}}' \
	"$url/apis/apps/v1/namespaces/rbac/statefulsets/idle/scale"
scaled() { answered sa-scale 200 && test "$(timeout 20 "$kubectl" -n rbac get sts idle -o jsonpath='{.spec.replicas}')" = 1; }
check "a patch of statefulsets/idle/scale as the SA (statefulsets/scale: patch): 200, replicas 1" scaled
as "$satok" sa-sts "$url/apis/apps/v1/namespaces/rbac/statefulsets/idle"
check "a get of the StatefulSet itself as the SA: 403" answered sa-sts 403 Forbidden \
	"statefulsets.apps \"idle\" is forbidden: $user cannot get resource \"statefulsets\" in API group \"apps\" in the namespace \"rbac\"" \
	'{"name": "idle", "group": "apps", "kind": "statefulsets"}'
as "$satok" sa-status -X PATCH -H 'Content-Type: application/merge-patch+json' -d '{"status": {}}' \
	"$url/apis/apps/v1/namespaces/rbac/statefulsets/idle/status"
check "a patch of statefulsets/idle/status as the SA: 403 naming the subresource" answered sa-status 403 Forbidden \
	"statefulsets.apps \"idle\" is forbidden: $user cannot patch resource \"statefulsets/status\" in API group \"apps\" in the namespace \"rbac\""
sed 's/namespace: simtest/namespace: rbac/' "$tmp/lease.yaml" >"$tmp/sa-lease.yaml"
sak create -f "$tmp/sa-lease.yaml" -o name >"$tmp/sa-lease.out" 2>&1
check "kubectl create -f of a Lease as the SA (leases: create)" grep -qx 'lease.coordination.k8s.io/leader' "$tmp/sa-lease.out"
as "$satok" sa-lease-del -X DELETE "$url/apis/coordination.k8s.io/v1/namespaces/rbac/leases/leader"
check "a delete of it as the SA (no delete verb): 403" answered sa-lease-del 403 Forbidden \
	"leases.coordination.k8s.io \"leader\" is forbidden: $user cannot delete resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"rbac\""
check "kubectl get namespace rbac as the SA (a ClusterRoleBinding to its group)" \
	test "$(sak get namespace rbac -o name 2>&1)" = namespace/rbac
as "$satok" sa-other "$url/api/v1/namespaces/simtest/configmaps/app-config"
check "another namespace as the SA: 403" answered sa-other 403 Forbidden \
	"configmaps \"app-config\" is forbidden: $user cannot get resource \"configmaps\" in API group \"\" in the namespace \"simtest\""
as "$satok" sa-sim "$url/_sim/pods"
check "/_sim/pods as the SA: 403 (admin only)" answered sa-sim 403 Forbidden "forbidden: $user cannot get path \"/_sim/pods\""
as "$satok" sa-discovery "$url/apis/coordination.k8s.io/v1"
check "discovery as the SA: 200" answered sa-discovery 200
as "$ghosttok" ghost "$url/api"
check "the token of a service account that does not exist: 401" answered ghost 401 Unauthorized Unauthorized
as "$tok" admin-all "$url/api/v1/namespaces/rbac/configmaps"
check "the admin token still lists them" answered admin-all 200

# 4b. in-cluster: a Deployment (Recreate) of a pod that reads the API with its ServiceAccount's token at the
# standard path (inside a shell script: no path rewriting) and serves HTTP on 0.0.0.0:8080, behind a Service
# whose clusterIP is asked for and whose targetPort is named
cat >"$tmp/incl.yaml" <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: incl}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: incl}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: incl}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: incl}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: ServiceAccount, name: reader, namespace: incl}]
---
apiVersion: v1
kind: Service
metadata: {name: front, namespace: incl}
spec:
  clusterIP: 127.1.55.55
  selector: {app: front}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: front, namespace: incl}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: front}}
  template:
    metadata:
      labels: {app: front}
    spec:
      serviceAccountName: reader
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: python:3
        command: ["/bin/sh", "-c"]
        args:
        - |
          sa=/var/run/secrets/kubernetes.io/serviceaccount
          get() { curl -s --cacert $sa/ca.crt -H "Authorization: Bearer $(cat $sa/token)" "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $sa/namespace)/$1"; }
          echo "cm: $(get configmaps/kube-root-ca.crt | grep -c '"name": *"kube-root-ca.crt"')"
          echo "secrets: $(get secrets | grep -c 'cannot list resource')"
          exec python3 -m http.server "$1" --bind "$2"
        - sh
        - "8080"
        - 0.0.0.0
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
YAML
check "kubectl apply: a ServiceAccount, its Role, a Service with clusterIP 127.1.55.55, a Deployment" \
	bash -c "timeout 20 $kubectl apply -f '$tmp/incl.yaml' >'$tmp/incl.out' 2>&1 || { cat '$tmp/incl.out'; false; }"
ki() { timeout 20 "$kubectl" -n incl "$@"; }
front_pod() { # the pod of deploy/front that runs and is not being deleted
	ki get pods -l app=front -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}' |
		awk '$2 == "Running" && NF == 2 {print $1}'
}
deploy_ready() { # rollout status succeeds and kubectl get deploy says 1/1, 1 up to date, 1 available
	timeout 30 "$kubectl" -n incl rollout status deploy/front --timeout=25s >/dev/null &&
		ki get deploy front --no-headers | grep -q '^front  *1/1  *1  *1 '
}
check "kubectl rollout status deploy/front succeeds; kubectl get deploy says 1/1" deploy_ready
fp1=$(front_pod)
rs_owned() {
	local h
	h=$(ki get pod "$fp1" -o jsonpath='{.metadata.labels.pod-template-hash}')
	[[ $fp1 =~ ^front-$h-[a-z0-9]{5}$ ]] &&
		[ "$(ki get rs "front-$h" -o jsonpath='{.metadata.ownerReferences[0].name} {.spec.replicas} {.status.readyReplicas}')" = "front 1 1" ] &&
		[ "$(ki get pod "$fp1" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')" = "ReplicaSet/front-$h" ]
}
check "the Deployment's ReplicaSet front-HASH made pod $fp1 (front-HASH-XXXXX), each owned by the one before" rs_owned
read_api() { ki logs "$fp1" | grep -qx 'cm: 1' && ki logs "$fp1" | grep -qx 'secrets: 1'; }
check "the pod read the API with its ServiceAccount's token at the standard path: its Role's ConfigMap, 403 on secrets" \
	until_true 5 read_api
env_seen() { # a kube-api-access volume in the spec; KUBERNETES_SERVICE_PORT in the container's environment
	local pid
	pid=$(records | python3 -c "import json, sys; print([r for r in json.load(sys.stdin) if r['name'] == '$fp1'][-1]['pid'])")
	ki get pod "$fp1" -o jsonpath='{.spec.volumes[*].name}' | grep -q kube-api-access- &&
		tr '\0' '\n' <"/proc/$pid/environ" | grep -qx "KUBERNETES_SERVICE_PORT=$port"
}
check "its container has KUBERNETES_SERVICE_PORT=$port and a kube-api-access volume" env_seen
via_cluster_ip() { [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.1.55.55:80/)" = 200 ]; }
check "the Service's clusterIP 127.1.55.55:80 reaches the pod's named port (port 80 to 8080: forwarded)" until_true 5 via_cluster_ip
svc_bad() { # svc_bad NAME CLUSTERIP: kubectl create's error
	printf '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "%s", "namespace": "incl"}, "spec": {"clusterIP": "%s", "ports": [{"port": 1}]}}' "$1" "$2" |
		timeout 20 "$kubectl" create -f - 2>&1
}
check "a clusterIP outside the range is 422 Invalid" bash -c "$(declare -f svc_bad); kubectl=$kubectl; svc_bad out 8.8.8.8 | grep -q 'the provided IP (8.8.8.8) is not in the valid range'"
check "a clusterIP in use is 422 Invalid" bash -c "$(declare -f svc_bad); kubectl=$kubectl; svc_bad dup 127.1.55.55 | grep -q 'provided IP is already allocated'"
ki delete pod "$fp1" --wait=false >/dev/null
replaced() { local p; p=$(front_pod); [ -n "$p" ] && [ "$p" != "$fp1" ]; }
check "a deleted pod is replaced by the ReplicaSet" until_true 10 replaced
fp2=$(front_pod)
ki rollout restart deploy/front >/dev/null
restarted() { local p; p=$(front_pod); [ -n "$p" ] && [ "$p" != "$fp2" ] && [ "$p" != "$fp1" ]; }
check "kubectl rollout restart (Recreate): a new ReplicaSet's pod" until_true 15 restarted
fp3=$(front_pod)
recreated() { # the old pod was stopped (SIGTERM) and ended; the new one is another ReplicaSet's
	records | python3 -c "
import json, sys
r = {x['name']: x for x in json.load(sys.stdin)}
assert r['$fp2']['signals'][:1] == ['SIGTERM'] and r['$fp2']['exit_codes'], r['$fp2']" &&
		[ "${fp3%-*}" != "${fp2%-*}" ]
}
check "... the old pod stopped (Recreate: the new one starts once it ended), the new one another ReplicaSet's" recreated
two_rs() { deploy_ready && [ "$(ki get rs --no-headers | wc -l)" = 2 ]; }
check "kubectl rollout status deploy/front succeeds again (two ReplicaSets, the old at 0)" two_rs

# 4c. the Eviction API and kubectl drain
check "kubectl get pdb: MIN AVAILABLE N/A, MAX UNAVAILABLE 1, ALLOWED DISRUPTIONS 1 with both pods Ready" until_true 10 pdb_allows 1
uid0=$(uid_of gated-0)
timeout 30 "$kubectl" drain sim-node --pod-selector app=gated,statefulset.kubernetes.io/pod-name=gated-0 \
	--disable-eviction=false --timeout 20s >"$tmp/drain.out" 2>&1
check "kubectl drain (pod selector): node cordoned, gated-0 evicted through the eviction API, drained" \
	grep -qx 'pod/gated-0 evicted' "$tmp/drain.out"
check "... the node is unschedulable (cordoned)" test "$(timeout 20 "$kubectl" get node sim-node -o jsonpath='{.spec.unschedulable}')" = true
timeout 20 "$kubectl" uncordon sim-node >/dev/null
replaced0() { local u; u=$(uid_of gated-0) && [ -n "$u" ] && [ "$u" != "$uid0" ] && [ "$(phase_of gated-0)" = Running ]; }
check "... the evicted pod got SIGTERM (graceful) and the StatefulSet made gated-0 again" bash -c \
	"$(declare -f records api); tok=$tok url=$url tmp=$tmp; records | python3 -c 'import json, sys
r = [r for r in json.load(sys.stdin) if r[\"uid\"] == \"$uid0\"]
assert r and r[0][\"signals\"] == [\"SIGTERM\"] and r[0][\"removed\"], r'"
until_true 10 replaced0
check "while the new gated-0 is not Ready: ALLOWED DISRUPTIONS 0" until_true 10 pdb_allows 0
evict ev-refused gated-1
check "an eviction of gated-1 then: 429 TooManyRequests, the budget's cause" answered ev-refused 429 TooManyRequests \
	"Cannot evict pod as it would violate the pod's disruption budget." \
	'{"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget gated needs 1 healthy pods and has 1 currently"}]}'
check "... and gated-1 runs on" test "$(ke get pod gated-1 -o jsonpath='{.metadata.deletionTimestamp}')" = ""
uid0b=$(uid_of gated-0)
evict ev-unready gated-0
check "the unready gated-0 may be evicted (the budget is whole without it): 201 Success" python3 -c "
import json
assert open('$tmp/ev-unready.code').read() == '201'
s = json.load(open('$tmp/ev-unready.json'))
assert (s['kind'], s['status'], s['code']) == ('Status', 'Success', 201), s"
printf 'apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: second, namespace: evict}\nspec: {minAvailable: 1, selector: {matchLabels: {app: gated}}}\n' |
	timeout 20 "$kubectl" apply -f - >/dev/null
evict ev-two gated-1
check "a pod two budgets cover: 500, not supported" answered ev-two 500 InternalError \
	"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."

# 5. unreachable, then back; 401; TLS
pid0=$(records | python3 -c 'import json, sys; print([r for r in json.load(sys.stdin) if r["name"] == "web-0"][-1]["pid"])')
api -X POST "$url/_sim/unreachable?seconds=2" >/dev/null
refused() { ! curl -s --max-time 2 --cacert "$tmp/tls/ca.crt" "$url/version" >/dev/null; }
until_true 2 refused
k get pods >"$tmp/dark.out" 2>&1
check "while unreachable, kubectl get pods fails: connection refused (exit $?)" grep -q refused "$tmp/dark.out"
check "afterwards kubectl works again on the same port" until_true 10 running "web-0 "
check "web-0 (pid $pid0) kept running meanwhile" kill -0 "$pid0"
curl -sS --max-time 10 --cacert "$tmp/tls/ca.crt" -o "$tmp/noauth.json" -w '%{http_code}' "$url/api/v1/namespaces" >"$tmp/noauth.code"
check "a request without the token: 401 and an Unauthorized Status" python3 -c "
import json
assert open('$tmp/noauth.code').read() == '401'
s = json.load(open('$tmp/noauth.json'))
assert (s['kind'], s['status'], s['reason'], s['code']) == ('Status', 'Failure', 'Unauthorized', 401), s"
curl -sS --max-time 10 -H "Authorization: Bearer $tok" "$url/version" >/dev/null 2>"$tmp/notls.err"
check "curl without --cacert fails TLS verification (exit $?)" grep -qi 'certificate' "$tmp/notls.err"

# 6. the simulator's end is its pods' end
pids=$(records | python3 -c 'import json, sys; print(" ".join(str(p) for r in json.load(sys.stdin) for p in r["pids"]))')
kill -TERM $sim
gone() { ! kill -0 $sim 2>/dev/null; }
check "SIGTERM stops the simulator" until_true 10 gone
none_alive() { # a zombie is dead: its parent went, and not every init reaps at once
	for p in $pids; do
		kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" != Z ] && return 1
	done
	return 0
}
check "no process its kubelet started outlives it (pids $pids)" none_alive

[ "$fails" = 0 ] || tail -n 30 "$tmp/sim.err"
finish_checks k8s_sim
