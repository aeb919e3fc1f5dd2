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
#      got SIGTERM (the kubelet's record, /_sim/pods) and ran their trap;
#      `kubectl delete pod` of a running pod returns once it is gone, and the
#      controller makes it again; a pod ignoring SIGTERM is SIGKILLed when
#      its grace period ends; `kubectl create secret` (a protobuf body) works;
#   3. watches with curl: from an old resourceVersion after /_sim/compact,
#      the 410 Expired ERROR event; with allowWatchBookmarks, a BOOKMARK and a
#      clean end at timeoutSeconds; /_sim/drop-watches cuts an open watch;
#   4. /_sim/unreachable?seconds=2: kubectl fails, then works again, and the
#      pods ran on meanwhile; no token is 401, no CA fails TLS verification;
#   5. SIGTERM to the simulator ends every process its kubelet started.
# APISIM=FILE runs another copy of the simulator (to check that checks fail).
set -u
. "$(dirname "$0")/../lib/itest.sh"
kubectl=tools/bin/kubectl
[ -x "$kubectl" ] || { echo "FAILED: $kubectl is missing (make tools)"; exit 1; }
tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

python3 "${APISIM:-tests/k8s/apisim.py}" --port 0 --port-file "$tmp/port" --token "$tok" --tls-dir "$tmp/tls" \
	--kubeconfig-out "$tmp/kubeconfig" --root "$tmp/pods" --bin-dir "" --bookmark-interval 0.5 \
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
trapped() { grep -qx 'got SIGTERM' "$tmp/pods/simtest/web-2/main.log" &&
	grep -qx web-1 "$tmp/pods/simtest/web-1/volumes/scratch/terminated"; }
check "their trap ran: 'got SIGTERM' logged, a marker in the emptyDir" trapped
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

# 4. unreachable, then back; 401; TLS
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

# 5. the simulator's end is its pods' end
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
