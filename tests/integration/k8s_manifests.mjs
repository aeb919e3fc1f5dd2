// k8s_manifests.mjs - checks of the Kubernetes objects rowshift ships, for
// k8s_manifests.sh: YAML parsed with the pinned `yaml` package (tools/).
//
// usage: node k8s_manifests.mjs COMMAND ARGS...
//        node k8s_manifests.mjs --serve PREFIX   many commands, one node (see serve)
//   same CHART.yaml MANIFEST.yaml...   the chart (rendered with release and
//       namespace `rowshift`) and the plain manifests define the same
//       (kind, name) set (the manifests' Namespace aside) and equal objects,
//       compared whole after leaving out only what must differ: the labels
//       managed-by, helm.sh/chart and version, the image tag, the Secret's
//       values (keys compared), and the model config's formatting (compared
//       as parsed JSON)
//   contract FILE... [--helm]            the objects the coordinator's Kubernetes
//       mode is written against: names, args, env and their sources, ports,
//       probes (the worker's: Ready while its ready file exists), volumes,
//       selectors, labels (helm.sh/chart with --helm)
//   model FILE... JSON                    the ConfigMap rowshift-model's model.json equals JSON
//   rbac FILE...                         exactly the coordinator's Role: pods
//       get/list/watch, configmaps create and get/update (rowshift-state),
//       leases create and get/update (rowshift-worker-leader), events create
//       (core and events.k8s.io), the worker StatefulSet's get and its
//       scale's patch (rowshift-worker); no cluster-wide RBAC
//   nonroot FILE...                      no container can run as root or gain privileges
//   token FILE...                        print the Secret's join token
//   gpu FILE... [--resource NAME]       print the worker's nvidia.com/gpu (NAME) limit, or "none"
//   qos FILE...                          every container has cpu and memory requests equal to its limits
//   devices FILE...                      print the worker's --device, --transport, GPU limits and both
//       pods' NVIDIA_VISIBLE_DEVICES, one line
//   image FILE... WANT                   every container runs the image WANT
//   servicemonitor FILE... [--tls] [--token]  the ServiceMonitor scrapes the coordinator's Service
//   hatches FILE... VALUES.json          coordinator.* and worker.* escape hatches of VALUES are in the pods
//   tokens FILE... SECRET                no Secret rendered, the pods' tokens come from SECRET
//   replicas FILE...                     print the worker StatefulSet's replicas
//   tls FILE...                          the chart rendered with tls.secretName=rowshift-tls
//   checkpoint FILE...                   the chart rendered with checkpoint.existingClaim=ckpts, every=500, keep=3
//   tolerations FILE...                  print the coordinator's tolerations, one line:
//       KEY:OPERATOR:EFFECT:SECONDS ... ("-" for what is not set; "none" when it has none)
// Exits non-zero, saying what differs, when a check fails.
import { createRequire } from "node:module";
import { openSync, readFileSync, readSync, writeFileSync, writeSync } from "node:fs";
import { format, isDeepStrictEqual } from "node:util";
const require = createRequire(new URL("../../tools/", import.meta.url));
const YAML = require("yaml");

let cmd, failed;
const fail = (why) => { console.error(`k8s_manifests ${cmd}: ${why}`); failed++; };

function load(files) {
  const objs = [];
  for (const f of files) {
    for (const doc of YAML.parseAllDocuments(readFileSync(f, "utf8"))) {
      if (doc.errors.length) throw new Error(`${f}: ${doc.errors[0].message}`);
      const o = doc.toJS();
      if (o == null) continue;
      if (!o.kind || !o.metadata || !o.metadata.name) throw new Error(`${f}: an object without kind or metadata.name`);
      objs.push(o);
    }
  }
  return objs;
}
const key = (o) => `${o.kind}/${o.metadata.name}`;
const byKey = (objs) => {
  const m = new Map();
  for (const o of objs) {
    if (m.has(key(o))) fail(`${key(o)} is defined twice`);
    m.set(key(o), o);
  }
  return m;
};
const find = (objs, kind, name) => {
  const o = objs.find((x) => x.kind === kind && (name === undefined || x.metadata.name === name));
  if (!o) throw new Error(`no ${kind}${name ? "/" + name : ""}`);
  return o;
};
const podSpecs = (objs) => objs.filter((o) => o.spec && o.spec.template && o.spec.template.spec)
  .map((o) => ({ owner: key(o), spec: o.spec.template.spec }));
const containersOf = (spec) => [...(spec.initContainers || []), ...(spec.containers || [])];

// --- same --------------------------------------------------------------------
const DROP_LABELS = ["app.kubernetes.io/managed-by", "helm.sh/chart", "app.kubernetes.io/version"];
function normalize(o) {
  o = structuredClone(o);
  const walk = (x) => {
    if (Array.isArray(x)) { x.forEach(walk); return; }
    if (x && typeof x === "object") {
      if (x.labels && typeof x.labels === "object") for (const l of DROP_LABELS) delete x.labels[l];
      if (typeof x.image === "string") x.image = x.image.replace(/(@sha256:[0-9a-f]{64}|:[^:/@]+)$/, "");
      Object.values(x).forEach(walk);
    }
  };
  walk(o);
  if (o.kind === "Secret") {
    o.keys = [...Object.keys(o.data || {}), ...Object.keys(o.stringData || {})].sort();
    delete o.data; delete o.stringData;
  }
  if (o.kind === "ConfigMap" && o.data && typeof o.data["model.json"] === "string") {
    o.data["model.json"] = JSON.parse(o.data["model.json"]);
  }
  return o;
}
function diff(a, b, path, out) {
  if (isDeepStrictEqual(a, b)) return;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    if (Array.isArray(a) && a.length !== b.length) {
      out.push(`${path}: ${a.length} items in the chart, ${b.length} in the manifests`);
    }
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) diff(a[k], b[k], `${path}.${k}`, out);
    return;
  }
  out.push(`${path}: chart ${JSON.stringify(a)}, manifests ${JSON.stringify(b)}`);
}
function same([chartFile, ...manifestFiles]) {
  const chart = byKey(load([chartFile]));
  const manifests = load(manifestFiles);
  const ns = manifests.filter((o) => o.kind === "Namespace");
  if (ns.length !== 1 || ns[0].metadata.name !== "rowshift") fail("the manifests should create the namespace rowshift, once");
  const plain = byKey(manifests.filter((o) => o.kind !== "Namespace"));
  const only = (a, b) => [...a.keys()].filter((k) => !b.has(k));
  for (const k of only(chart, plain)) fail(`${k} is in the chart, not in the manifests`);
  for (const k of only(plain, chart)) fail(`${k} is in the manifests, not in the chart`);
  let compared = 0;
  for (const [k, c] of chart) {
    if (!plain.has(k)) continue;
    const out = [];
    diff(normalize(c), normalize(plain.get(k)), k, out);
    out.forEach(fail);
    compared++;
  }
  if (compared < 9) fail(`only ${compared} objects compared`);
  if (!failed) console.log(`${compared} objects agree: ${[...chart.keys()].join(", ")}`);
}

// --- contract -----------------------------------------------------------------
function expectEq(what, got, want) {
  if (!isDeepStrictEqual(got, want)) fail(`${what}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}
const secretEnv = (name, key) => ({ name, valueFrom: { secretKeyRef: { name: "rowshift-join-token", key } } });
const fieldEnv = (name, fieldPath) => ({ name, valueFrom: { fieldRef: { fieldPath } } });
// The coordinator's tolerations of a failed node (NoExecute, replaced after `seconds`); the cluster's default is 300 s.
const NODE_FAILURE_KEYS = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];
const nodeFailure = (seconds) => NODE_FAILURE_KEYS.map((key) => ({ key, operator: "Exists", effect: "NoExecute", tolerationSeconds: seconds }));
const SECURITY = {
  runAsNonRoot: true, runAsUser: 10001, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] }, seccompProfile: { type: "RuntimeDefault" },
};
function contract(args) {
  const helm = args.includes("--helm");
  const objs = load(args.filter((a) => a !== "--helm"));
  const names = new Set(objs.map(key));
  const want = ["ServiceAccount/rowshift-coordinator", "Role/rowshift-coordinator", "RoleBinding/rowshift-coordinator",
    "Secret/rowshift-join-token", "ConfigMap/rowshift-model", "Deployment/rowshift-coordinator",
    "Service/rowshift-coordinator", "Service/rowshift-worker", "StatefulSet/rowshift-worker",
    "PodDisruptionBudget/rowshift-worker"];
  for (const w of want) if (!names.has(w)) fail(`no ${w}`);
  for (const o of objs) {
    if (o.kind === "Namespace") continue;
    expectEq(`${key(o)} namespace`, o.metadata.namespace, "rowshift");
    const l = o.metadata.labels || {};
    for (const [k, v] of [["app.kubernetes.io/name", "rowshift"], ["app.kubernetes.io/instance", "rowshift"],
      ["app.kubernetes.io/part-of", "rowshift"], ["app.kubernetes.io/managed-by", helm ? "Helm" : "kubectl"]]) {
      expectEq(`${key(o)} label ${k}`, l[k], v);
    }
    if (!l["app.kubernetes.io/component"]) fail(`${key(o)} has no component label`);
    if (helm && !/^rowshift-/.test(l["helm.sh/chart"] || "")) fail(`${key(o)} has no helm.sh/chart label`);
  }
  const binding = find(objs, "RoleBinding", "rowshift-coordinator");
  expectEq("RoleBinding roleRef", binding.roleRef, { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "rowshift-coordinator" });
  expectEq("RoleBinding subjects", binding.subjects, [{ kind: "ServiceAccount", name: "rowshift-coordinator", namespace: "rowshift" }]);
  if (!find(objs, "Secret", "rowshift-join-token")) fail("no join token");

  // the coordinator
  const dep = find(objs, "Deployment", "rowshift-coordinator");
  expectEq("coordinator replicas", dep.spec.replicas, 1);
  expectEq("coordinator strategy", dep.spec.strategy, { type: "Recreate" });
  const coordSel = { "app.kubernetes.io/name": "rowshift", "app.kubernetes.io/instance": "rowshift", "app.kubernetes.io/component": "coordinator" };
  expectEq("coordinator selector", dep.spec.selector.matchLabels, coordSel);
  const cpod = dep.spec.template;
  for (const [k, v] of Object.entries(coordSel)) expectEq(`coordinator pod label ${k}`, cpod.metadata.labels[k], v);
  expectEq("coordinator prometheus annotations", cpod.metadata.annotations,
    { "prometheus.io/scrape": "true", "prometheus.io/port": "7070", "prometheus.io/path": "/metrics" });
  expectEq("coordinator serviceAccountName", cpod.spec.serviceAccountName, "rowshift-coordinator");
  if (cpod.spec.automountServiceAccountToken === false) fail("the coordinator needs its service account token");
  expectEq("coordinator containers", cpod.spec.containers.map((c) => c.name), ["coordinator"]);
  const cc = cpod.spec.containers[0];
  if (!/^ghcr\.io\/rowshift\/rowshift:/.test(cc.image)) fail(`coordinator image ${cc.image}`);
  expectEq("coordinator command", cc.command, ["rowshift-coordinator"]);
  const a = cc.args || [];
  expectEq("coordinator args", a.slice(0, 11), ["--kubernetes", "--config", "/etc/rowshift/model.json",
    "--statefulset", "rowshift-worker", "--selector",
    "app.kubernetes.io/name=rowshift,app.kubernetes.io/instance=rowshift,app.kubernetes.io/component=worker",
    "--state-configmap", "rowshift-state", "--listen", "0.0.0.0:7070"]);
  expectEq("coordinator args (flags with values)", [a[11], a[13], a.length], ["--steps", "--debounce-ms", 15]);
  if (!/^-?\d+$/.test(a[12] || "") || !/^\d+$/.test(a[14] || "")) fail(`--steps ${a[12]} --debounce-ms ${a[14]}: not integers`);
  const cenv = (cc.env || []).filter((e) => e.name !== "ROWSHIFT_STATUS_TOKEN");
  expectEq("coordinator env", cenv, [secretEnv("ROWSHIFT_JOIN_TOKEN", "token"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
    fieldEnv("ROWSHIFT_POD_NAME", "metadata.name"), { name: "ROWSHIFT_LEASE", value: "rowshift-worker-leader" },
    { name: "ROWSHIFT_ALLOWED_HOSTS", value: "rowshift-coordinator,rowshift-coordinator.rowshift,rowshift-coordinator.rowshift.svc,rowshift-coordinator.rowshift.svc.cluster.local" },
    { name: "NVIDIA_VISIBLE_DEVICES", value: "void" }]);
  const st = (cc.env || []).find((e) => e.name === "ROWSHIFT_STATUS_TOKEN");
  if (st) expectEq("coordinator ROWSHIFT_STATUS_TOKEN", st, secretEnv("ROWSHIFT_STATUS_TOKEN", "status-token"));
  expectEq("coordinator ports", cc.ports, [{ name: "control", containerPort: 7070, protocol: "TCP" }]);
  expectEq("coordinator liveness", cc.livenessProbe && cc.livenessProbe.httpGet, { path: "/healthz", port: 7070 });
  expectEq("coordinator readiness", cc.readinessProbe && cc.readinessProbe.httpGet, { path: "/readyz", port: 7070 });
  expectEq("coordinator startup probe", cc.startupProbe && cc.startupProbe.httpGet, { path: "/healthz", port: 7070 });
  // a new coordinator waits up to the Lease's 30 s for the old one's to expire before it listens, then reads its state
  if (!(cc.startupProbe && cc.startupProbe.periodSeconds * cc.startupProbe.failureThreshold >= 90)) {
    fail(`coordinator startup probe: ${JSON.stringify(cc.startupProbe)} allows less than 90 s to start`);
  }
  expectEq("coordinator tolerations (a failed node: replaced after 30 s)", cpod.spec.tolerations, nodeFailure(30));
  // the Lease the coordinator is told to hold is the one its Role lets it get and update
  const leaseEnv = (cc.env || []).find((e) => e.name === "ROWSHIFT_LEASE");
  const leaseRules = (find(objs, "Role", "rowshift-coordinator").rules || [])
    .filter((r) => (r.apiGroups || []).includes("coordination.k8s.io") && r.resourceNames);
  expectEq("the Lease of ROWSHIFT_LEASE is the Role's", leaseRules.map((r) => r.resourceNames), [[leaseEnv && leaseEnv.value]]);
  const svc = find(objs, "Service", "rowshift-coordinator");
  expectEq("coordinator Service type", svc.spec.type || "ClusterIP", "ClusterIP");
  expectEq("coordinator Service selector", svc.spec.selector, coordSel);
  expectEq("coordinator Service ports", svc.spec.ports, [{ name: "control", port: 7070, targetPort: "control", protocol: "TCP" }]);

  // the workers
  const sts = find(objs, "StatefulSet", "rowshift-worker");
  const workerSel = { "app.kubernetes.io/name": "rowshift", "app.kubernetes.io/instance": "rowshift", "app.kubernetes.io/component": "worker" };
  expectEq("worker serviceName", sts.spec.serviceName, "rowshift-worker");
  expectEq("worker podManagementPolicy", sts.spec.podManagementPolicy, "Parallel");
  expectEq("worker updateStrategy", sts.spec.updateStrategy, { type: "RollingUpdate" });
  expectEq("worker replicas", sts.spec.replicas, 2);
  expectEq("worker selector", sts.spec.selector.matchLabels, workerSel);
  const wpod = sts.spec.template;
  for (const [k, v] of Object.entries(workerSel)) expectEq(`worker pod label ${k}`, wpod.metadata.labels[k], v);
  expectEq("worker automountServiceAccountToken", wpod.spec.automountServiceAccountToken, false);
  if (wpod.spec.serviceAccountName) fail("the workers need no service account");
  expectEq("worker terminationGracePeriodSeconds", wpod.spec.terminationGracePeriodSeconds, 600);
  expectEq("worker containers", wpod.spec.containers.map((c) => c.name), ["worker"]);
  const wc = wpod.spec.containers[0];
  expectEq("worker command", wc.command, ["rowshift-worker"]);
  expectEq("worker args", wc.args, ["--config", "/etc/rowshift/model.json", "--device", "cuda", "--transport", "tcp"]);
  expectEq("worker env", wc.env, [{ name: "ROWSHIFT_COORDINATOR", value: "ws://rowshift-coordinator:7070" },
    secretEnv("ROWSHIFT_JOIN_TOKEN", "token"), fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_IP", "status.podIP"), fieldEnv("POD_UID", "metadata.uid"),
    { name: "ROWSHIFT_COORDINATOR_GRACE_MS", value: "300000" }, { name: "ROWSHIFT_READY_FILE", value: "/run/rowshift/ready" }]);
  // Ready means joined: the probe tests the worker's ready file, on a small in-memory emptyDir (the root fs is read-only)
  expectEq("worker readiness probe", wc.readinessProbe,
    { exec: { command: ["test", "-e", "/run/rowshift/ready"] }, periodSeconds: 5, failureThreshold: 1, successThreshold: 1 });
  const runMount = (wc.volumeMounts || []).find((m) => m.mountPath === "/run/rowshift");
  expectEq("worker /run/rowshift mount", runMount, { name: "run", mountPath: "/run/rowshift" });
  expectEq("worker /run/rowshift volume", (wpod.spec.volumes || []).find((v) => v.name === "run"),
    { name: "run", emptyDir: { medium: "Memory", sizeLimit: "1Mi" } });
  if (wc.livenessProbe || wc.startupProbe) fail("the worker has a liveness or startup probe: a worker waiting to join is not broken");
  expectEq("worker GPU limit", wc.resources && wc.resources.limits && wc.resources.limits["nvidia.com/gpu"], 1);
  const pdb = find(objs, "PodDisruptionBudget", "rowshift-worker");
  expectEq("worker PodDisruptionBudget", [pdb.apiVersion, pdb.spec], ["policy/v1", { maxUnavailable: 1, selector: { matchLabels: workerSel } }]);
  qosOf([["coordinator", cc], ["worker", wc]]);
  const hsvc = find(objs, "Service", "rowshift-worker");
  expectEq("worker Service clusterIP", hsvc.spec.clusterIP, "None");
  expectEq("worker Service selector", hsvc.spec.selector, workerSel);

  // both pods: security, the model volume, a writable /tmp, no service links
  for (const [who, pod] of [["coordinator", cpod.spec], ["worker", wpod.spec]]) {
    const c = pod.containers[0];
    for (const [k, v] of Object.entries(SECURITY)) expectEq(`${who} securityContext.${k}`, c.securityContext && c.securityContext[k], v);
    expectEq(`${who} pod seccompProfile`, pod.securityContext && pod.securityContext.seccompProfile, { type: "RuntimeDefault" });
    expectEq(`${who} enableServiceLinks`, pod.enableServiceLinks, false);
    const vols = Object.fromEntries((pod.volumes || []).map((v) => [v.name, v]));
    const mounts = Object.fromEntries((c.volumeMounts || []).map((m) => [m.mountPath, m]));
    const model = mounts["/etc/rowshift"];
    if (!model || model.readOnly !== true) fail(`${who}: /etc/rowshift is not mounted read-only`);
    else expectEq(`${who} /etc/rowshift volume`, vols[model.name] && vols[model.name].configMap, { name: "rowshift-model" });
    const tmpm = mounts["/tmp"];
    if (!tmpm || !vols[tmpm.name] || !vols[tmpm.name].emptyDir) fail(`${who}: /tmp is not an emptyDir`);
  }
  if (!failed) console.log(`the contract holds (${objs.length} objects)`);
}

// Guaranteed QoS: cpu and memory requested, and requests equal to limits (units compared as written).
function qosOf(containers) {
  for (const [who, c] of containers) {
    const r = c.resources || {}, req = r.requests || {}, lim = r.limits || {};
    for (const k of ["cpu", "memory"]) {
      if (lim[k] === undefined || String(req[k] ?? lim[k]) !== String(lim[k])) {
        fail(`${who}: ${k} requests ${JSON.stringify(req[k])}, limits ${JSON.stringify(lim[k])} (want both, equal: Guaranteed QoS)`);
      }
    }
    for (const [k, v] of Object.entries(req)) if (lim[k] !== undefined && String(lim[k]) !== String(v)) fail(`${who}: ${k} requests ${v}, limits ${lim[k]}`);
  }
}
function qos(args) {
  const specs = podSpecs(load(args));
  if (specs.length < 2) fail(`only ${specs.length} pod templates`);
  qosOf(specs.flatMap(({ owner, spec }) => containersOf(spec).map((c) => [`${owner} ${c.name}`, c])));
  if (!failed) console.log(`Guaranteed QoS: ${specs.map((s) => s.owner).join(", ")}`);
}

// --- model, rbac, nonroot, token, gpu ------------------------------------------
function model(args) {
  const want = JSON.parse(readFileSync(args.pop(), "utf8"));
  const cm = find(load(args), "ConfigMap", "rowshift-model");
  const got = JSON.parse(cm.data["model.json"]);
  if (!isDeepStrictEqual(got, want)) {
    const out = [];
    diff(got, want, "model.json", out);
    out.forEach((d) => fail(d.replace("chart", "rendered").replace("manifests", "expected")));
  } else console.log(`model.json: ${got.tables.length} tables, as expected`);
}
function rbac(args) {
  const objs = load(args);
  for (const o of objs) if (o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding") fail(`${key(o)}: no cluster-wide rights`);
  const roles = objs.filter((o) => o.kind === "Role");
  expectEq("Roles", roles.map(key), ["Role/rowshift-coordinator"]);
  const grants = [];
  for (const r of roles[0].rules || []) {
    for (const f of ["nonResourceURLs"]) if (r[f]) fail(`a rule with ${f}`);
    for (const g of r.apiGroups || []) for (const res of r.resources || []) for (const v of r.verbs || []) {
      grants.push(`${g || "core"}/${res}:${v}${r.resourceNames ? "@" + [...r.resourceNames].sort().join(",") : ""}`);
    }
    const all = [...(r.apiGroups || []), ...(r.resources || []), ...(r.verbs || []), ...(r.resourceNames || [])];
    if (all.some((x) => x.includes("*"))) fail(`a wildcard in ${JSON.stringify(r)}`);
    if ((r.resources || []).some((x) => /secret/.test(x))) fail(`the coordinator may not touch secrets: ${JSON.stringify(r)}`);
  }
  expectEq("the Role's grants", grants.sort(), [
    "core/configmaps:create", "core/configmaps:get@rowshift-state", "core/configmaps:update@rowshift-state",
    "core/events:create", "core/pods:get", "core/pods:list", "core/pods:watch", "events.k8s.io/events:create",
    "apps/statefulsets:get@rowshift-worker", "apps/statefulsets/scale:patch@rowshift-worker",
    "coordination.k8s.io/leases:create", "coordination.k8s.io/leases:get@rowshift-worker-leader",
    "coordination.k8s.io/leases:update@rowshift-worker-leader",
  ].sort());
  if (!failed) console.log(`the Role grants exactly: ${grants.join(" ")}`);
}
function nonroot(args) {
  const specs = podSpecs(load(args));
  if (specs.length < 2) fail(`only ${specs.length} pod templates`);
  for (const { owner, spec } of specs) {
    const psc = spec.securityContext || {};
    if (spec.hostPID || spec.hostIPC || spec.hostNetwork) fail(`${owner}: shares a host namespace`);
    for (const c of containersOf(spec)) {
      const sc = c.securityContext || {};
      const nonRoot = sc.runAsNonRoot ?? psc.runAsNonRoot;
      const uid = sc.runAsUser ?? psc.runAsUser;
      if (nonRoot !== true) fail(`${owner} ${c.name}: runAsNonRoot is not true`);
      if (uid === undefined || uid === 0) fail(`${owner} ${c.name}: runAsUser ${uid} (want a non-zero uid)`);
      if (sc.privileged) fail(`${owner} ${c.name}: privileged`);
      if (sc.allowPrivilegeEscalation !== false) fail(`${owner} ${c.name}: allowPrivilegeEscalation is not false`);
      if (!sc.capabilities || !isDeepStrictEqual(sc.capabilities.drop, ["ALL"]) || sc.capabilities.add) {
        fail(`${owner} ${c.name}: capabilities ${JSON.stringify(sc.capabilities)} (want drop ALL, add nothing)`);
      }
    }
  }
  if (!failed) console.log(`${specs.length} pod templates, every container non-root (${specs.map((s) => s.owner).join(", ")})`);
}
function token(args) {
  const s = find(load(args), "Secret", "rowshift-join-token");
  const t = s.stringData && s.stringData.token !== undefined ? s.stringData.token
    : Buffer.from((s.data && s.data.token) || "", "base64").toString();
  console.log(t);
}
// gpu FILE... [--resource NAME]: the worker's limit of NAME (default nvidia.com/gpu), or "none"
function gpu(args) {
  const at = args.indexOf("--resource");
  const name = at >= 0 ? args.splice(at, 2)[1] : "nvidia.com/gpu";
  const c = find(load(args), "StatefulSet", "rowshift-worker").spec.template.spec.containers[0];
  const g = c.resources && ((c.resources.limits || {})[name] ?? (c.resources.requests || {})[name]);
  console.log(g === undefined ? "none" : String(g));
}
// What each pod is given to run on, one line: the worker's --device and --transport, the extended
// resources of its limits, and NVIDIA_VISIBLE_DEVICES of both ("-" when not set), e.g.
// "worker: device=cpu transport=tcp gpus=none visible=void; coordinator: visible=void"
function devices(args) {
  const objs = load(args);
  const wc = find(objs, "StatefulSet", "rowshift-worker").spec.template.spec.containers[0];
  const cc = find(objs, "Deployment", "rowshift-coordinator").spec.template.spec.containers[0];
  const flag = (c, f) => { const i = (c.args || []).indexOf(f); return i < 0 ? "-" : c.args[i + 1]; };
  const visible = (c) => { const e = (c.env || []).find((x) => x.name === "NVIDIA_VISIBLE_DEVICES"); return e ? e.value : "-"; };
  const ext = Object.entries((wc.resources || {}).limits || {}).filter(([k]) => k.includes("/")).map(([k, v]) => `${k}=${v}`);
  console.log(`worker: device=${flag(wc, "--device")} transport=${flag(wc, "--transport")} gpus=${ext.join(",") || "none"} ` +
    `visible=${visible(wc)}; coordinator: visible=${visible(cc)}`);
}
// image FILE... WANT: both containers run exactly the image WANT
function image(args) {
  const want = args.pop();
  const specs = podSpecs(load(args));
  if (specs.length < 2) fail(`only ${specs.length} pod templates`);
  for (const { owner, spec } of specs) for (const c of containersOf(spec)) expectEq(`${owner} ${c.name} image`, c.image, want);
  if (!failed) console.log(`every container runs ${want}`);
}
// servicemonitor FILE... [--tls] [--token]: the ServiceMonitor selects the coordinator's Service and scrapes /metrics
// on its port (with --tls: https against the workers' CA and the Service's name; --token: the status token)
function servicemonitor(args) {
  const tlsOn = args.includes("--tls"), tokenOn = args.includes("--token");
  const objs = load(args.filter((a) => !a.startsWith("--")));
  const sm = find(objs, "ServiceMonitor", "rowshift-coordinator");
  const svc = find(objs, "Service", "rowshift-coordinator");
  expectEq("ServiceMonitor apiVersion", sm.apiVersion, "monitoring.coreos.com/v1");
  expectEq("ServiceMonitor namespaces", sm.spec.namespaceSelector, { matchNames: ["rowshift"] });
  const sel = sm.spec.selector.matchLabels || {};
  if (!Object.keys(sel).length || !Object.entries(sel).every(([k, v]) => svc.metadata.labels[k] === v)) fail(`selector ${JSON.stringify(sel)} does not select the coordinator's Service`);
  for (const o of objs) if (o.kind === "Service" && o !== svc && Object.entries(sel).every(([k, v]) => (o.metadata.labels || {})[k] === v)) fail(`the selector also selects ${key(o)}`);
  expectEq("ServiceMonitor endpoints", sm.spec.endpoints.length, 1);
  const ep = sm.spec.endpoints[0];
  if (!svc.spec.ports.some((p) => p.name === ep.port && p.port === 7070)) fail(`endpoint port ${ep.port} is not the Service's port 7070`);
  expectEq("ServiceMonitor path", ep.path, "/metrics");
  expectEq("ServiceMonitor scheme", ep.scheme || "http", tlsOn ? "https" : "http");
  if (tlsOn) expectEq("ServiceMonitor tlsConfig", ep.tlsConfig, { serverName: "rowshift-coordinator.rowshift.svc", ca: { secret: { name: "rowshift-tls", key: "ca.crt" } } });
  expectEq("ServiceMonitor authorization", ep.authorization, tokenOn ? { type: "Bearer", credentials: { name: "rowshift-join-token", key: "status-token" } } : undefined);
  if (!failed) console.log(`ServiceMonitor: ${ep.scheme || "http"}://rowshift-coordinator:${ep.port}${ep.path}`);
}
// hatches FILE... VALUES.json: the escape hatches of VALUES (coordinator.* and worker.*) are in each pod as given
function hatches(args) {
  const values = JSON.parse(readFileSync(args.pop(), "utf8"));
  const objs = load(args);
  for (const [who, kind] of [["coordinator", "Deployment"], ["worker", "StatefulSet"]]) {
    const v = values[who], tpl = find(objs, kind, `rowshift-${who}`).spec.template, spec = tpl.spec, c = spec.containers[0];
    for (const [k, x] of Object.entries(v.podLabels || {})) expectEq(`${who} pod label ${k}`, tpl.metadata.labels[k], x);
    for (const [k, x] of Object.entries(v.podAnnotations || {})) expectEq(`${who} pod annotation ${k}`, (tpl.metadata.annotations || {})[k], x);
    expectEq(`${who} pod component label`, tpl.metadata.labels["app.kubernetes.io/component"], who);
    for (const f of ["priorityClassName", "runtimeClassName", "nodeSelector", "tolerations", "affinity"]) {
      if (v[f] === undefined) continue;
      let want = v[f];
      if (who === "coordinator" && f === "tolerations") { // the chart's for a failed node first, unless the user's replace them
        const mine = (k) => want.some((t) => t.key === k && [undefined, "", "NoExecute"].includes(t.effect));
        want = [...nodeFailure(v.nodeFailureTolerationSeconds ?? 30).filter((t) => !mine(t.key)), ...want];
      }
      expectEq(`${who} ${f}`, spec[f], want);
    }
    if (v.topologySpreadConstraints) {
      const sel = { "app.kubernetes.io/name": "rowshift", "app.kubernetes.io/instance": "rowshift", "app.kubernetes.io/component": who };
      expectEq(`${who} topologySpreadConstraints`, spec.topologySpreadConstraints,
        v.topologySpreadConstraints.map((t) => (t.labelSelector ? t : { ...t, labelSelector: { matchLabels: sel } })));
    }
    const tail = (list, n) => (list || []).slice(-n);
    if (v.extraEnv) expectEq(`${who} extraEnv (last)`, tail(c.env, v.extraEnv.length), v.extraEnv);
    if (v.extraVolumes) expectEq(`${who} extraVolumes (last)`, tail(spec.volumes, v.extraVolumes.length), v.extraVolumes);
    if (v.extraVolumeMounts) expectEq(`${who} extraVolumeMounts (last)`, tail(c.volumeMounts, v.extraVolumeMounts.length), v.extraVolumeMounts);
    for (const [k, x] of Object.entries(v.securityContext || {})) expectEq(`${who} securityContext.${k}`, c.securityContext[k], x === null ? undefined : x);
    for (const [k, x] of Object.entries(v.podSecurityContext || {})) expectEq(`${who} podSecurityContext.${k}`, spec.securityContext[k], x === null ? undefined : x);
  }
  if (!failed) console.log("the escape hatches are in both pods as given");
}
// tokens FILE... SECRET: no Secret rendered; every token the pods read comes from SECRET (the status token optional)
function tokens(args) {
  const name = args.pop(), objs = load(args);
  for (const o of objs) if (o.kind === "Secret") fail(`${key(o)} is rendered`);
  let n = 0;
  for (const { owner, spec } of podSpecs(objs)) for (const c of containersOf(spec)) for (const e of c.env || []) {
    const ref = e.valueFrom && e.valueFrom.secretKeyRef;
    if (!ref) continue;
    n++;
    expectEq(`${owner} ${e.name}`, ref, e.name === "ROWSHIFT_STATUS_TOKEN" ? { name, key: "status-token", optional: true } : { name, key: "token" });
  }
  if (n !== 3) fail(`${n} secret references (want the join token of both pods and the coordinator's status token)`);
  if (!failed) console.log(`the pods read their tokens from ${name}; no Secret rendered`);
}
function replicas(args) {
  console.log(String(find(load(args), "StatefulSet", "rowshift-worker").spec.replicas));
}
// The chart with tls.secretName=rowshift-tls: the coordinator reads the Secret's certificate and key
// (mounted for it alone), probes and scraping use https; the workers connect with wss:// and get ca.crt only.
function tls(args) {
  const objs = load(args);
  const dep = find(objs, "Deployment", "rowshift-coordinator").spec.template;
  const cc = dep.spec.containers[0];
  const env = Object.fromEntries((cc.env || []).map((e) => [e.name, e.value]));
  expectEq("coordinator TLS env", [env.ROWSHIFT_TLS_CERT, env.ROWSHIFT_TLS_KEY],
    ["/etc/rowshift-tls/tls.crt", "/etc/rowshift-tls/tls.key"]);
  const cvol = (dep.spec.volumes || []).find((v) => v.name === "tls");
  expectEq("coordinator TLS volume", cvol && cvol.secret, { secretName: "rowshift-tls", defaultMode: 0o400,
    items: [{ key: "tls.crt", path: "tls.crt" }, { key: "tls.key", path: "tls.key" }] });
  expectEq("coordinator TLS mount", (cc.volumeMounts || []).find((m) => m.name === "tls"),
    { name: "tls", mountPath: "/etc/rowshift-tls", readOnly: true });
  expectEq("probe schemes", [cc.livenessProbe.httpGet.scheme, cc.readinessProbe.httpGet.scheme], ["HTTPS", "HTTPS"]);
  expectEq("scrape scheme", dep.metadata.annotations["prometheus.io/scheme"], "https");
  const ws = find(objs, "StatefulSet", "rowshift-worker").spec.template.spec;
  const wenv = Object.fromEntries((ws.containers[0].env || []).map((e) => [e.name, e.value]));
  expectEq("worker URL and CA", [wenv.ROWSHIFT_COORDINATOR, wenv.ROWSHIFT_TLS_CA],
    ["wss://rowshift-coordinator:7070", "/etc/rowshift-tls/ca.crt"]);
  const wvol = (ws.volumes || []).find((v) => v.name === "tls-ca");
  expectEq("worker TLS volume: ca.crt only, never the key", wvol && wvol.secret,
    { secretName: "rowshift-tls", items: [{ key: "ca.crt", path: "ca.crt" }] });
  if (!failed) console.log("TLS: the coordinator's certificate and key, https probes, wss:// workers with ca.crt only");
}
// The chart with checkpoint.existingClaim=ckpts, every=500, keep=3: the claim mounted at /checkpoints in both
// pods, the coordinator saving the final model there and taking periodic checkpoints.
function checkpoint(args) {
  const objs = load(args);
  const dep = find(objs, "Deployment", "rowshift-coordinator").spec.template.spec;
  const ws = find(objs, "StatefulSet", "rowshift-worker").spec.template.spec;
  expectEq("coordinator checkpoint args", (dep.containers[0].args || []).slice(15),
    ["--save", "/checkpoints/final", "--checkpoint-dir", "/checkpoints/periodic", "--checkpoint-every", "500",
     "--checkpoint-keep", "3"]);
  for (const [who, spec] of [["coordinator", dep], ["worker", ws]]) {
    expectEq(`${who} checkpoint volume`, (spec.volumes || []).find((v) => v.name === "checkpoints"),
      { name: "checkpoints", persistentVolumeClaim: { claimName: "ckpts" } });
    expectEq(`${who} checkpoint mount`, (spec.containers[0].volumeMounts || []).find((m) => m.name === "checkpoints"),
      { name: "checkpoints", mountPath: "/checkpoints" });
  }
  if (!failed) console.log("checkpoints: the claim at /checkpoints in both pods, --save and periodic checkpoints there");
}

function tolerations(args) {
  const t = find(load(args), "Deployment", "rowshift-coordinator").spec.template.spec.tolerations || [];
  console.log(t.map((x) => [x.key, x.operator, x.effect, x.tolerationSeconds].map((f) => (f === undefined || f === "" ? "-" : f)).join(":")).join(" ") || "none");
}

/*
 * Every object against the Kubernetes OpenAPI schemas (kubernetes-models, in
 * tools/: types, formats, required fields, enums of each kind's version).
 * Kinds outside Kubernetes itself (the ServiceMonitor's CRD) are named as not
 * covered, never counted as valid.
 */
async function schemas(args) {
  const objs = load(args);
  const notCovered = [];
  let valid = 0;
  for (const o of objs) {
    const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
    if (group.endsWith("coreos.com")) { notCovered.push(`${key(o)} (${o.apiVersion}, a CRD)`); continue; }
    let Model;
    try {
      Model = (await import(new URL(`../../tools/node_modules/kubernetes-models/${group ? group + "/" : ""}${version}/${o.kind}.js`, import.meta.url)))[o.kind];
    } catch (e) {
      fail(`${key(o)}: no schema for ${o.apiVersion} ${o.kind} (${e.message.split("\n")[0]})`);
      continue;
    }
    try {
      new Model(o).validate();
      valid++;
    } catch (e) {
      fail(`${key(o)} (${o.apiVersion}) does not match its schema: ${e.message.split("\n").slice(0, 3).join("; ")}`);
    }
  }
  console.log(`${valid} of ${objs.length} objects valid against the Kubernetes schemas` +
              (notCovered.length ? `; not covered: ${notCovered.join(", ")}` : ""));
}

const commands = { schemas, tolerations, same, contract, model, rbac, nonroot, token, gpu, tls, checkpoint, qos, devices, image, servicemonitor, hatches, tokens, replicas };
// run([COMMAND, ...ARGS]): its exit status (what it says goes to console.log and console.error)
async function run([name, ...args]) {
  cmd = name;
  failed = 0;
  if (!Object.hasOwn(commands, name)) {
    console.error(`usage: node k8s_manifests.mjs ${Object.keys(commands).join("|")} FILE...`);
    return 2;
  }
  try { await commands[name](args); } catch (e) { fail(e.message); }
  return failed ? 1 : 0;
}

/*
 * --serve PREFIX: one node for the many checks of k8s_manifests.sh (a node
 * start costs about 0.35 s of CPU, and it makes some sixty). Requests come
 * through the FIFO PREFIX.req, each NUL-terminated strings: an ID, the number
 * of words, the words (COMMAND ARGS...); for each, what the command printed
 * goes to PREFIX.ID.out and PREFIX.ID.err, then the line "ID STATUS" to the
 * FIFO PREFIX.resp. Both FIFOs are held open for reading and writing, so that
 * neither side's open waits for the other; "ready" on PREFIX.resp says so
 * (a request written before would be lost with the FIFO's last writer). The
 * server runs until killed.
 */
async function serve(prefix) {
  const req = openSync(`${prefix}.req`, "r+");
  const resp = openSync(`${prefix}.resp`, "r+");
  writeSync(resp, "ready\n");
  const chunk = Buffer.alloc(65536);
  let buf = Buffer.alloc(0);
  const word = () => {
    for (;;) {
      const end = buf.indexOf(0);
      if (end >= 0) {
        const w = buf.subarray(0, end).toString();
        buf = buf.subarray(end + 1);
        return w;
      }
      const n = readSync(req, chunk);
      if (n === 0) throw new Error(`${prefix}.req: end of file`);
      buf = Buffer.concat([buf, chunk.subarray(0, n)]);
    }
  };
  const { log, error } = console;
  for (;;) {
    const id = word();
    const argv = Array.from({ length: Number(word()) }, word);
    if (!/^[\w.-]+$/.test(id)) throw new Error(`${prefix}.req: a bad request ID ${JSON.stringify(id)}`);
    const out = [], err = [];
    console.log = (...a) => out.push(format(...a) + "\n");
    console.error = (...a) => err.push(format(...a) + "\n");
    const status = await run(argv);
    console.log = log;
    console.error = error;
    writeFileSync(`${prefix}.${id}.out`, out.join(""));
    writeFileSync(`${prefix}.${id}.err`, err.join(""));
    writeSync(resp, `${id} ${status}\n`);
  }
}

const argv = process.argv.slice(2);
if (argv[0] === "--serve") await serve(argv[1]);
else process.exitCode = await run(argv);
