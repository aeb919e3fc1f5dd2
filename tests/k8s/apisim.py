#!/usr/bin/env python3
"""apisim.py - a Kubernetes API server simulator for rowshift's tests.

It speaks enough of the real API (discovery, OpenAPI v3 for field
validation, list/get/create/update/patch/delete, watch with bookmarks and
410 Expired, Table output, pods/log, the scale subresource, protobuf bodies
of the simple kinds kubectl create sends, object size limits, schema
validation through node and kubernetes-models: schemas.mjs) over
HTTP/1.1 (TLS optional; an admin bearer token, and service-account tokens
authorized by the stored RBAC objects) that the real kubectl, helm and the
coordinator's libcurl client work against it unmodified. StatefulSet,
Deployment and ReplicaSet controllers make pods, a garbage collector
cascades deletions, a "kubelet" runs every pod's containers as real
processes on this machine, each pod on its own loopback address
(127.0.1.N), with its service account's token at the standard path (in a
mount namespace of its own), and a "kube-proxy" makes Services' cluster IPs
(127.1.0.N) forward to their pods. Fault endpoints under /_sim/ drop
watches, forget the history, lose writes' answers, hold containers'
starts and make the API unreachable.

Python 3.9+ standard library only (and node for the schemas). See
tests/k8s/README.md.

Sections: utilities and errors, resources, selectors, patches, protobuf
request bodies, store, watch hub, tables and discovery, authentication
and RBAC, controllers, kubelet, kube-proxy, HTTP handler, main.
"""

import argparse
import atexit
import base64
import calendar
import collections
import copy
import ctypes
import hashlib
import hmac
import http.client
import json
import os
import queue
import random
import re
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

K8S_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-apisim", "gitCommit": "0" * 40,
               "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0",
               "compiler": "gc", "platform": "linux/amd64"}

OPT = None  # the parsed command line, set by main()
NODE_NAME = "sim-node"
API_PORT = None  # the port the API listens on, once it does (the pods' KUBERNETES_SERVICE_PORT)
CA_PEM = ""  # the CA certificate with --tls-dir (the kube-root-ca.crt ConfigMaps, a pod's ca.crt)
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the token volume is mounted in every container
POD_TOKENS = {}  # minted service-account token -> (namespace, service account, pod uid): bound to the pod
POD_TOKENS_LOCK = threading.Lock()
TRACE_LOCK = threading.Lock()


def log(msg):
    sys.stderr.write("apisim: %s\n" % msg)
    sys.stderr.flush()


# ==== utilities and errors ==========================================================================

def now_ts(t=None):
    """RFC 3339 in UTC, seconds precision: what metav1.Time serializes to."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def parse_ts(s):
    if not s:
        return None
    try:
        return calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def human_age(seconds):
    """kubectl's duration.HumanDuration, so AGE columns read like a real cluster's."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = m // 60
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    if h < 24 * 8:
        return "%dd%dh" % (h // 24, h % 24) if h % 24 else "%dd" % (h // 24)
    if h < 24 * 365 * 2:
        return "%dd" % (h // 24)
    return "%dy" % (h // 24 // 365)


def age_of(ts):
    t = parse_ts(ts)
    return "<unknown>" if t is None else human_age(time.time() - t)


def meta(obj):
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = obj["metadata"] = {}
    return m


def dig(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict) and p in obj:
            obj = obj[p]
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return default
    return obj


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def status_obj(code, reason, message, details=None, status="Failure"):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status, "message": message,
         "reason": reason, "code": code}
    if details:
        s["details"] = details
    if status == "Success":
        del s["message"], s["reason"]
    return s


class ApiError(Exception):
    """An error answered as a Status object, with the real server's reason and wording."""

    def __init__(self, code, reason, message, details=None):
        Exception.__init__(self, message)
        self.code, self.status = code, status_obj(code, reason, message, details)


def err_not_found(res, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (res.gr, name),
                    {"name": name, "group": res.group, "kind": res.plural})


def err_exists(res, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (res.gr, name),
                    {"name": name, "group": res.group, "kind": res.plural})


def err_conflict(res, name, why="the object has been modified; please apply your changes to the latest version "
                                "and try again"):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (res.gr, name, why),
                    {"name": name, "group": res.group, "kind": res.plural})


def err_bad(message):
    return ApiError(400, "BadRequest", message)


CAUSE_REASONS = (("Required value", "FieldValueRequired"), ("Too long", "FieldValueTooLong"),
                 ("Unsupported value", "FieldValueNotSupported"), ("Forbidden", "FieldValueForbidden"))


def err_invalid(res, name, causes):
    """422 Invalid: `Kind.group "name" is invalid: field: message` (the kind qualified by its group, as the real
    server's GroupKind prints); each cause's reason follows its message ("Too long: ..." is FieldValueTooLong)."""
    kind = res.kind if not res.group else "%s.%s" % (res.kind, res.group)
    listed = ", ".join("%s: %s" % c for c in causes)  # more than one: bracketed, as an aggregate prints
    msg = '%s "%s" is invalid: %s' % (kind, name, listed if len(causes) == 1 else "[%s]" % listed)
    reason = lambda m: next((r for p, r in CAUSE_REASONS if m.startswith(p)), "FieldValueInvalid")
    details = {"name": name, "group": res.group, "kind": res.kind,
               "causes": [{"reason": reason(m), "message": m, "field": f} for f, m in causes]}
    if not res.group:
        del details["group"]  # omitempty, as the real server serializes StatusDetails
    return ApiError(422, "Invalid", msg, details)


def err_forbidden(user, ri, reason=""):
    """403 Forbidden as the real authorization filter words it (responsewriters.Forbidden)."""
    if not ri["resource_request"]:
        why = 'User "%s" cannot %s path "%s"' % (user.name, ri["verb"], ri["path"])
        msg, details = "forbidden: " + why, {}
    else:
        r = ri["resource"] + ("/" + ri["sub"] if ri["sub"] else "")
        why = 'User "%s" cannot %s resource "%s" in API group "%s" ' % (user.name, ri["verb"], r, ri["group"])
        why += 'in the namespace "%s"' % ri["ns"] if ri["ns"] else "at the cluster scope"
        gr = ri["resource"] + ("." + ri["group"] if ri["group"] else "")
        msg = ('%s "%s" is forbidden: ' % (gr, ri["name"]) if ri["name"] else "%s is forbidden: " % gr) + why
        details = {k: v for k, v in (("name", ri["name"]), ("group", ri["group"]), ("kind", ri["resource"])) if v}
    if reason:
        msg += ": " + reason
    return ApiError(403, "Forbidden", msg, details)


MAX_REQUEST_BODY = 3 * 1024 * 1024  # the apiserver's MaxRequestBodyBytes
MAX_DATA_SIZE = 1024 * 1024  # core.MaxSecretSize: a ConfigMap's or a Secret's data


def err_too_large():
    return ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_REQUEST_BODY)


def err_no_route():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def err_method():
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json",
               "application/apply-patch+yaml")


def err_media(ctype):
    return ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media "
                    "types include: " + ", ".join(PATCH_TYPES), {})


# ==== resources =====================================================================================

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class Resource:
    """One served resource: its group/version/plural, kind, scope, and what discovery says about it."""

    def __init__(self, group, version, plural, kind, namespaced=True, short=(), categories=(), subresources=(),
                 status=False):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced, self.short, self.categories = namespaced, list(short), list(categories)
        self.subresources = list(subresources)  # (name, group, version, kind, verbs)
        self.has_status = status  # the status subresource: writes to the main resource leave status alone
        self.api_version = version if not group else "%s/%s" % (group, version)
        self.gr = plural if not group else "%s.%s" % (plural, group)  # how error messages name it
        self.singular = kind.lower()
        self.key = (group, plural)


def _subs(*names):
    """Subresources served as the parent's kind: log (get), status (get, patch, update)."""
    return [(n, None, None, None, ["get"] if n == "log" else ["get", "patch", "update"]) for n in names]


SCALE = ("scale", "autoscaling", "v1", "Scale", ["get", "patch", "update"])
EVICTION = ("eviction", "policy", "v1", "Eviction", ["create"])  # what kubectl drain looks for in /api/v1
RESOURCES = [
    Resource("", "v1", "namespaces", "Namespace", namespaced=False, short=["ns"], subresources=_subs("status"),
             status=True),
    Resource("", "v1", "nodes", "Node", namespaced=False, short=["no"], subresources=_subs("status"), status=True),
    Resource("", "v1", "pods", "Pod", short=["po"], categories=["all"],
             subresources=[EVICTION] + _subs("log", "status"),
             status=True),
    Resource("", "v1", "configmaps", "ConfigMap", short=["cm"]),
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "services", "Service", short=["svc"], categories=["all"], subresources=_subs("status"),
             status=True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", short=["sa"]),
    Resource("", "v1", "events", "Event", short=["ev"]),
    Resource("", "v1", "endpoints", "Endpoints", short=["ep"]),
    Resource("apps", "v1", "statefulsets", "StatefulSet", short=["sts"], categories=["all"],
             subresources=[SCALE] + _subs("status"), status=True),
    Resource("apps", "v1", "deployments", "Deployment", short=["deploy"], categories=["all"],
             subresources=[SCALE] + _subs("status"), status=True),
    Resource("apps", "v1", "replicasets", "ReplicaSet", short=["rs"], categories=["all"],
             subresources=[SCALE] + _subs("status"), status=True),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    Resource("events.k8s.io", "v1", "events", "Event", short=["ev"]),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short=["netpol"]),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short=["pdb"], subresources=_subs("status"),
             status=True),
]
BY_GVR = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KEY = {r.key: r for r in RESOURCES}
GROUPS = collections.OrderedDict()  # group -> [versions], in discovery order
for _r in RESOURCES:
    GROUPS.setdefault(_r.group, [])
    if _r.version not in GROUPS[_r.group]:
        GROUPS[_r.group].append(_r.version)
R_POD, R_NS, R_STS, R_DEPLOY = BY_KEY[("", "pods")], BY_KEY[("", "namespaces")], BY_KEY[("apps", "statefulsets")], \
    BY_KEY[("apps", "deployments")]
R_CM, R_SECRET, R_SA, R_EVENT = BY_KEY[("", "configmaps")], BY_KEY[("", "secrets")], BY_KEY[("", "serviceaccounts")], \
    BY_KEY[("", "events")]
R_SVC, R_LEASE = BY_KEY[("", "services")], BY_KEY[("coordination.k8s.io", "leases")]
R_RS = BY_KEY[("apps", "replicasets")]
R_PDB, R_NODE = BY_KEY[("policy", "poddisruptionbudgets")], BY_KEY[("", "nodes")]
R_ROLE, R_RB, R_CROLE, R_CRB = (BY_KEY[("rbac.authorization.k8s.io", p)] for p in
                                ("roles", "rolebindings", "clusterroles", "clusterrolebindings"))

DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# ==== selectors =====================================================================================

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top(text, sep=","):
    """Split on `sep` outside parentheses: `a in (x,y),b` is two requirements."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


class LabelSelector:
    """A label selector string: =, ==, !=, in, notin, key, !key (and gt/lt), comma-separated (AND)."""

    def __init__(self, text):
        self.text, self.reqs = text or "", []
        if not self.text.strip():
            return
        for part in _split_top(self.text):
            p = part.strip()
            m = re.match(r"^([^\s!=<>()]+)\s+(in|notin)\s*\(([^()]*)\)$", p)
            if m:
                key, op = m.group(1), m.group(2)
                vals = [v.strip() for v in m.group(3).split(",") if v.strip()]
            elif p.startswith("!"):
                key, op, vals = p[1:].strip(), "!", []
            else:
                m = re.match(r"^([^\s!=<>()]+)\s*(!=|==|=|>|<)\s*([^\s!=<>()]*)$", p)
                if m:
                    key, op, vals = m.group(1), m.group(2), [m.group(3)]
                    op = "=" if op == "==" else op
                elif re.match(r"^[^\s!=<>()]+$", p):
                    key, op, vals = p, "exists", []
                else:
                    raise err_bad("unable to parse requirement: found '%s', expected: identifier" % p)
            if not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
                raise err_bad('unable to parse requirement: values[0][%s]: Invalid value: "%s": name part must '
                              'consist of alphanumeric characters, \'-\', \'_\' or \'.\'' % (key, key))
            for v in vals:
                if op in (">", "<"):
                    if not re.match(r"^-?\d+$", v):
                        raise err_bad("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                                      "an integer")
                elif not _LABEL_VALUE.match(v) or len(v) > 63:
                    raise err_bad('unable to parse requirement: values[0][%s]: Invalid value: "%s"' % (key, v))
            self.reqs.append((key, op, vals))

    def matches(self, labels):
        labels = labels or {}
        for key, op, vals in self.reqs:
            has, val = key in labels, labels.get(key)
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
            if op == "=" and val != vals[0]:
                return False
            if op == "!=" and has and val == vals[0]:  # != also matches objects without the label
                return False
            if op == "in" and (not has or val not in vals):
                return False
            if op == "notin" and has and val in vals:
                return False
            if op in (">", "<"):
                try:
                    n = int(val)
                except (TypeError, ValueError):
                    return False
                if (op == ">" and not n > int(vals[0])) or (op == "<" and not n < int(vals[0])):
                    return False
        return True


def selector_from_label_selector(sel):
    """A metav1.LabelSelector (matchLabels, matchExpressions) as selector text (Scale.status.selector)."""
    parts = ["%s=%s" % kv for kv in sorted((sel or {}).get("matchLabels", {}).items())]
    for e in (sel or {}).get("matchExpressions", []) or []:
        op, k, vals = e.get("operator"), e.get("key"), e.get("values") or []
        if op == "In":
            parts.append("%s in (%s)" % (k, ",".join(vals)))
        elif op == "NotIn":
            parts.append("%s notin (%s)" % (k, ",".join(vals)))
        elif op == "Exists":
            parts.append(k)
        elif op == "DoesNotExist":
            parts.append("!" + k)
    return ",".join(parts)


def field_value(obj, path):
    """The value of a dotted field path, as the string a field selector compares with."""
    cur = obj
    for p in path.split("."):
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        else:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        return ""
    if isinstance(cur, (dict, list)):
        return dumps(cur)
    return str(cur)


class FieldSelector:
    """metadata.name=x, involvedObject.name==y, status.phase!=Running, ...: any dotted path (AND)."""

    def __init__(self, text):
        self.text, self.reqs = text or "", []
        if not self.text.strip():
            return
        for part in self.text.split(","):
            p = part.strip()
            m = re.match(r"^([A-Za-z0-9_.\[\]'/-]+)\s*(!=|==|=)\s*(.*)$", p)
            if not m:
                raise err_bad("invalid selector: '%s'; can't understand '%s'" % (self.text, p))
            self.reqs.append((m.group(1), m.group(2) != "!=", m.group(3).strip()))

    def matches(self, obj):
        for path, eq, val in self.reqs:
            if (field_value(obj, path) == val) != eq:
                return False
        return True

    def name(self):
        """The one name a `metadata.name=X` selector pins, or None."""
        for path, eq, val in self.reqs:
            if path == "metadata.name" and eq:
                return val
        return None


# ==== patches =======================================================================================

def json_merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise err_bad("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902: add, remove, replace, move, copy, test."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise err_bad("json patch must be an array of operations")

    def walk(path, parts):
        """The value at parts (the tokens of the pointer path) in doc."""
        cur = doc
        for p in parts:
            if isinstance(cur, list):
                try:
                    cur = cur[int(p)]
                except (ValueError, IndexError):
                    raise ApiError(422, "Invalid", "path %s: no element %s" % (path, p))
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ApiError(422, "Invalid", "doc is missing path: \"%s\": missing value" % path)
        return cur

    def parent(path):
        parts = _pointer(path)
        if not parts:
            raise ApiError(422, "Invalid", "the JSON pointer %r names the whole document" % path)
        return walk(path, parts[:-1]), parts[-1]

    def get(path):
        return walk(path, _pointer(path))

    def add(path, value):
        c, k = parent(path)
        if isinstance(c, list):
            if k == "-":
                c.append(value)
            else:
                c.insert(int(k), value)
        else:
            c[k] = value

    def remove(path):
        c, k = parent(path)
        try:
            return c.pop(int(k) if isinstance(c, list) else k)
        except (KeyError, IndexError, ValueError):
            raise ApiError(422, "Invalid", "doc is missing path: \"%s\": missing value" % path)

    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            remove(path)
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            add(path, remove(op.get("from", "")))
        elif kind == "copy":
            add(path, copy.deepcopy(get(op.get("from", ""))))
        elif kind == "test":
            if get(path) != op.get("value"):
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request: "
                               "testing value %s failed" % path)
        else:
            raise err_bad("Unexpected kind: %s" % kind)
    return doc


# Strategic merge patch: the lists Kubernetes merges by a key instead of replacing (patchMergeKey).
SMP_MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
                  "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
                  "imagePullSecrets": "name", "hostAliases": "ip", "conditions": "type", "ownerReferences": "uid",
                  "secrets": "name", "resourceClaims": "name", "topologySpreadConstraints": "topologyKey",
                  "ports": None}  # ports: containerPort in a container, port in a Service
SMP_PRIMITIVE_SETS = {"finalizers"}


def _merge_key(field, items):
    key = SMP_MERGE_KEYS.get(field)
    if field == "ports":
        for it in items:
            if isinstance(it, dict):
                return "containerPort" if "containerPort" in it else "port"
        return "port"
    return key


def strategic_merge(orig, patch):
    """Apply a strategic merge patch (what kubectl apply, edit, label and set send) to orig."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    orders = {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k[len("$setElementOrder/"):]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k[len("$deleteFromPrimitiveList/"):]
            if isinstance(out.get(f), list):
                out[f] = [x for x in out[f] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k), v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v)
        else:
            out[k] = v
    for f, order in orders.items():
        if isinstance(out.get(f), list):
            out[f] = _apply_order(f, out[f], order)
    if isinstance(retain, list):
        for k in list(out):
            if k not in retain and k not in patch:
                del out[k]
    return out


def _merge_list(field, orig, patch):
    orig = orig if isinstance(orig, list) else []
    if field in SMP_PRIMITIVE_SETS:
        out = list(orig)
        for x in patch:
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    if field not in SMP_MERGE_KEYS or not all(isinstance(x, dict) for x in patch):
        return [copy.deepcopy(x) for x in patch]  # atomic lists are replaced
    if any(x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if x.get("$patch") != "replace"]
    key = _merge_key(field, patch + orig)
    out = [copy.deepcopy(x) for x in orig]
    for item in patch:
        kv = item.get(key)
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == kv), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(strategic_merge({}, item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def _apply_order(field, items, order):
    """$setElementOrder: the patch's order of merge-key values; elements it does not name keep their place last."""
    key = _merge_key(field, items) if field in SMP_MERGE_KEYS else None
    pos = {}
    for i, o in enumerate(order or []):
        pos[dumps(o.get(key) if key and isinstance(o, dict) else o)] = i
    def rank(ix):
        i, x = ix
        k = dumps(x.get(key) if key and isinstance(x, dict) else x)
        return (pos.get(k, len(pos) + i),)
    return [x for _, x in sorted(enumerate(items), key=rank)]


# ==== protobuf request bodies =======================================================================
# kubectl's `create namespace|configmap|secret|serviceaccount|service|role|...` send their object as
# Kubernetes protobuf ("k8s\0" + runtime.Unknown). These schemas (field numbers from the API's
# generated.proto) cover those simple kinds; a field not listed is refused (415), never dropped.

PB_SCHEMAS = {
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "Unknown": {1: ("typeMeta", "TypeMeta"), 2: ("raw", "raw"), 3: ("contentEncoding", "string"),
                4: ("contentType", "string")},
    "ObjectMeta": {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                   4: ("selfLink", "string"), 5: ("uid", "string"), 6: ("resourceVersion", "string"),
                   7: ("generation", "int"), 11: ("labels", "map:string"), 12: ("annotations", "map:string"),
                   13: ("ownerReferences", "[OwnerReference"), 14: ("finalizers", "[string"),
                   17: ("managedFields", "skip"), 8: ("creationTimestamp", "skip")},
    "OwnerReference": {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
                       5: ("apiVersion", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")},
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec"), 3: ("status", "skip")},
    "NamespaceSpec": {1: ("finalizers", "[string")},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:string"), 3: ("binaryData", "map:bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:bytes"), 3: ("type", "string"),
               4: ("stringData", "map:string"), 5: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", "ObjectMeta"), 2: ("secrets", "[ObjectReference"),
                       3: ("imagePullSecrets", "[LocalObjectReference"), 4: ("automountServiceAccountToken", "bool")},
    "ObjectReference": {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                        4: ("uid", "string"), 5: ("apiVersion", "string"), 6: ("resourceVersion", "string"),
                        7: ("fieldPath", "string")},
    "LocalObjectReference": {1: ("name", "string")},
    "Service": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ServiceSpec"), 3: ("status", "skip")},
    "ServiceSpec": {1: ("ports", "[ServicePort"), 2: ("selector", "map:string"), 3: ("clusterIP", "string"),
                    4: ("type", "string"), 5: ("externalIPs", "[string"), 7: ("sessionAffinity", "string"),
                    8: ("loadBalancerIP", "string"), 9: ("loadBalancerSourceRanges", "[string"),
                    10: ("externalName", "string"), 11: ("externalTrafficPolicy", "string"),
                    12: ("healthCheckNodePort", "int0"), 13: ("publishNotReadyAddresses", "bool"),
                    17: ("ipFamilyPolicy", "string"), 18: ("clusterIPs", "[string"), 19: ("ipFamilies", "[string"),
                    20: ("allocateLoadBalancerNodePorts", "bool"), 21: ("loadBalancerClass", "string"),
                    22: ("internalTrafficPolicy", "string"), 23: ("trafficDistribution", "string")},
    "ServicePort": {1: ("name", "string"), 2: ("protocol", "string"), 3: ("port", "int"),
                    4: ("targetPort", "IntOrString"), 5: ("nodePort", "int0"), 6: ("appProtocol", "string")},
    "IntOrString": {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "string")},
    "PolicyRule": {1: ("verbs", "[string"), 2: ("apiGroups", "[string"), 3: ("resources", "[string"),
                   4: ("resourceNames", "[string"), 5: ("nonResourceURLs", "[string")},
    "Role": {1: ("metadata", "ObjectMeta"), 2: ("rules", "[PolicyRule")},
    "ClusterRole": {1: ("metadata", "ObjectMeta"), 2: ("rules", "[PolicyRule")},
    "Subject": {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"), 4: ("namespace", "string")},
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    "RoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[Subject"), 3: ("roleRef", "RoleRef")},
    "ClusterRoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[Subject"), 3: ("roleRef", "RoleRef")},
    "DeleteOptions": {1: ("gracePeriodSeconds", "int"), 2: ("preconditions", "Preconditions"),
                      3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "string"), 5: ("dryRun", "[string"),
                      6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "bool")},
    "Preconditions": {1: ("uid", "string"), 2: ("resourceVersion", "string")},
    "Eviction": {1: ("metadata", "ObjectMeta"), 2: ("deleteOptions", "DeleteOptions")},
}


class ProtoError(Exception):
    pass


def _varint(buf, i):
    n = shift = 0
    while True:
        if i >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def _pb_fields(buf):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ProtoError("wire type %d" % wire)
        yield field, v


def pb_decode(buf, msg):
    schema, out = PB_SCHEMAS[msg], {}
    for field, v in _pb_fields(buf):
        if field not in schema:
            raise ProtoError("field %d of %s" % (field, msg))
        name, typ = schema[field]
        repeated, typ = typ.startswith("["), typ.lstrip("[")
        if typ == "skip":
            continue
        if typ.startswith("map:"):
            entry = dict(_pb_fields(v))
            val = entry.get(2, b"")
            out.setdefault(name, {})[entry.get(1, b"").decode()] = \
                base64.b64encode(val).decode() if typ == "map:bytes" else val.decode()
            continue
        if typ == "string":
            val = v.decode()
        elif typ == "raw":
            val = v
        elif typ in ("int", "int0"):
            val = v - (1 << 64) if v >= 1 << 63 else v
            if typ == "int0" and not val:
                continue  # omitempty
        elif typ == "bool":
            val = bool(v)
        else:
            val = pb_decode(v, typ)
        if repeated:
            out.setdefault(name, []).append(val)
        elif val != "" and val is not False:  # gogo-protobuf writes empty optionals; JSON omits them
            out[name] = val
    if msg == "IntOrString":
        return out.get("strVal", "") if out.get("type") == 1 else out.get("intVal", 0)
    return out


def decode_protobuf(body):
    """A Kubernetes protobuf object as JSON-like dicts; ProtoError for a kind or field not covered."""
    if not body.startswith(b"k8s\x00"):
        raise ProtoError("no k8s protobuf magic")
    unk = pb_decode(body[4:], "Unknown")
    tm = unk.get("typeMeta") or {}
    kind = tm.get("kind", "")
    if kind not in PB_SCHEMAS or kind in ("Unknown", "TypeMeta") or unk.get("contentEncoding"):
        raise ProtoError("kind %s" % kind)
    obj = pb_decode(unk.get("raw", b""), kind)
    obj["apiVersion"], obj["kind"] = tm.get("apiVersion"), kind
    return obj


# ==== store =========================================================================================

class Event:
    """One change in the history: what a watch from an older resourceVersion replays."""
    __slots__ = ("rv", "type", "key", "ns", "obj", "old")

    def __init__(self, rv, type_, key, ns, obj, old):
        self.rv, self.type, self.key, self.ns, self.obj, self.old = rv, type_, key, ns, obj, old


class Store:
    """Every object, one global resourceVersion counter (like etcd) and the event history.

    Stored dicts are never mutated in place: every write stores a fresh copy, so readers may hold
    references outside the lock. Watch queues are fed under the lock, so a watch registered while
    holding it sees every later event exactly once and in order.
    """

    def __init__(self, history_max):
        self.lock = threading.RLock()
        self.rv = 0
        self.objects = {r.key: {} for r in RESOURCES}  # (group, plural) -> {(ns, name): obj}
        self.history = collections.deque()
        self.starts_held_until = 0.0  # /_sim/hold-starts: the kubelet starts no container before then
        self.history_max = history_max
        self.compacted = 0  # the newest resourceVersion whose event is forgotten
        self.watchers = set()
        self.kicks = []  # threading.Events set on every change (controllers, kubelet)
        self.ip_counter = 10

    # -- reading

    def get(self, res, ns, name):
        with self.lock:
            o = self.objects[res.key].get((ns or "", name))
            if o is None:
                raise err_not_found(res, name)
            return copy.deepcopy(o)

    def peek(self, res, ns, name):
        """The stored object itself (read-only) or None."""
        with self.lock:
            return self.objects[res.key].get((ns or "", name))

    def all(self, res, ns=None):
        """Stored objects (read-only), sorted like etcd keys: namespace, then name."""
        with self.lock:
            items = [o for (n, _), o in self.objects[res.key].items() if ns is None or n == ns]
        return sorted(items, key=lambda o: (meta(o).get("namespace", ""), meta(o).get("name", "")))

    def list(self, res, ns, lsel, fsel):
        with self.lock:
            items = [copy.deepcopy(o) for o in self.all(res, ns)
                     if lsel.matches(meta(o).get("labels")) and fsel.matches(o)]
            return items, str(self.rv)

    # -- writing

    def _commit(self, res, type_, obj, old):
        """Bump the counter, store (or drop) obj, record the event and hand it to watches."""
        self.rv += 1
        m = meta(obj)
        m["resourceVersion"] = str(self.rv)
        key = (m.get("namespace", "") if res.namespaced else "", m["name"])
        if type_ == "DELETED":
            self.objects[res.key].pop(key, None)
        else:
            self.objects[res.key][key] = obj
        ev = Event(self.rv, type_, res.key, key[0], copy.deepcopy(obj), old)
        self.history.append(ev)
        while len(self.history) > self.history_max:
            self.compacted = self.history.popleft().rv
        for w in list(self.watchers):
            w.offer(ev)
        for k in self.kicks:
            k.set()
        return copy.deepcopy(obj)

    def create(self, res, ns, body, dry_run=False, internal=False):
        with self.lock:
            obj = copy.deepcopy(body)
            m = meta(obj)
            if res.namespaced:
                if m.get("namespace") and ns and m["namespace"] != ns:
                    raise err_bad("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
                m["namespace"] = ns
                nso = self.objects[R_NS.key].get(("", ns))
                if nso is None:
                    raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                                   {"name": ns, "kind": "namespaces"})
                if meta(nso).get("deletionTimestamp") and not internal:
                    raise ApiError(403, "Forbidden", '%s "%s" is forbidden: unable to create new content in '
                                   'namespace %s because it is being terminated' % (res.gr, m.get("name", ""), ns),
                                   {"name": m.get("name", ""), "group": res.group, "kind": res.plural})
            else:
                m.pop("namespace", None)
            if not m.get("name"):
                if m.get("generateName"):
                    alphabet = "bcdfghjklmnpqrstvwxz2456789"
                    m["name"] = m["generateName"] + "".join(random.choice(alphabet) for _ in range(5))
                else:
                    raise err_invalid(res, "", [("metadata.name", "Required value: name or generateName is "
                                                                  "required")])
            name = m["name"]
            valid = DNS1123_LABEL if res in (R_NS, R_SVC) else DNS1123_SUB
            if not valid.match(name) or len(name) > 253:
                raise err_invalid(res, name, [("metadata.name", 'Invalid value: "%s": a lowercase RFC 1123 '
                                               'subdomain must consist of lower case alphanumeric characters, '
                                               '\'-\' or \'.\', and must start and end with an alphanumeric '
                                               'character' % name)])
            if obj.get("kind") not in (None, "", res.kind) or obj.get("apiVersion") not in (None, "",
                                                                                             res.api_version):
                raise err_bad("the API version in the data (%s) does not match the expected API version (%s)"
                              % (obj.get("apiVersion"), res.api_version) if obj.get("kind") == res.kind else
                              "%s in version \"%s\" cannot be handled as a %s: no kind \"%s\" is registered"
                              % (obj.get("kind"), res.version, res.kind, obj.get("kind")))
            if (m.get("namespace", ""), name) in self.objects[res.key]:
                raise err_exists(res, name)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                m.pop(k, None)
            m["uid"] = str(uuid.uuid4())
            m["creationTimestamp"] = now_ts()
            m["generation"] = 1
            if res.has_status and not internal:
                obj.pop("status", None)
            defaults(res, obj, self)
            validate(res, obj)
            if dry_run:
                m["resourceVersion"] = str(self.rv)
                return obj
            out = self._commit(res, "ADDED", obj, None)
            after_create(res, out, self)
            return out

    def update(self, res, ns, name, body, subresource=None, dry_run=False, check_rv=True):
        """PUT: the whole object (or, for the status subresource, its status)."""
        with self.lock:
            cur = self.objects[res.key].get((ns or "", name))
            if cur is None:
                raise err_not_found(res, name)
            new = copy.deepcopy(body)
            m = meta(new)
            if m.get("name") not in (None, name):
                raise err_bad('the name of the object (%s) does not match the name on the URL (%s)'
                              % (m.get("name"), name))
            rv = m.get("resourceVersion")
            if check_rv and rv and rv != meta(cur).get("resourceVersion"):
                raise err_conflict(res, name)
            return self._replace(res, cur, new, subresource, dry_run)

    def _replace(self, res, cur, new, subresource, dry_run):
        cm, m = meta(cur), meta(new)
        if res.has_status:
            if subresource == "status":  # only status changes
                st = new.get("status")
                new = copy.deepcopy(cur)
                if st is None:
                    new.pop("status", None)
                else:
                    new["status"] = st
                m = meta(new)
            elif "status" in cur:
                new["status"] = copy.deepcopy(cur["status"])
            else:
                new.pop("status", None)
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        for k in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation"):
            if k in cm:
                m[k] = cm[k]
            else:
                m.pop(k, None)
        m.pop("managedFields", None)
        normalize(res, new, cur)
        validate(res, new)
        spec_of = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status", "apiVersion", "kind")}
        if spec_of(new) != spec_of(cur):
            m["generation"] = cm.get("generation", 1) + 1
        m["resourceVersion"] = cm.get("resourceVersion")
        if new == cur:
            return copy.deepcopy(cur)  # a no-op write bumps nothing, like the real server
        if dry_run:
            return new
        # an object being deleted goes once its last finalizer is removed
        if m.get("deletionTimestamp") and not m.get("finalizers") and res not in (R_POD, R_NS):
            return self._commit(res, "DELETED", new, cur)
        return self._commit(res, "MODIFIED", new, cur)

    def patch(self, res, ns, name, ctype, body, subresource=None, dry_run=False):
        with self.lock:
            cur = self.objects[res.key].get((ns or "", name))
            if ctype == "application/apply-patch+yaml":  # server-side apply, approximated
                if cur is None:
                    return self.create(res, ns, body, dry_run), 201
            if cur is None:
                raise err_not_found(res, name)
            new = self._patched(cur, ctype, body)
            rv = meta(new).get("resourceVersion")
            if rv and rv != meta(cur).get("resourceVersion"):
                raise err_conflict(res, name)
            return self._replace(res, cur, new, subresource, dry_run), 200

    @staticmethod
    def _patched(cur, ctype, body):
        if ctype == "application/json-patch+json":
            return json_patch(cur, body)
        if not isinstance(body, dict):
            raise err_bad("the patch must be a JSON object")
        if ctype == "application/merge-patch+json":
            return json_merge_patch(cur, body)
        if ctype in ("application/strategic-merge-patch+json", "application/apply-patch+yaml"):
            return strategic_merge(cur, body)
        raise err_media(ctype)

    def mutate(self, res, ns, name, fn, uid=None):
        """Internal read-modify-write (controllers, kubelet): fn edits a copy; no conflict checks."""
        with self.lock:
            cur = self.objects[res.key].get((ns or "", name))
            if cur is None or (uid and meta(cur).get("uid") != uid):
                return None
            new = copy.deepcopy(cur)
            fn(new)
            if new == cur:
                return cur
            return self._commit(res, "MODIFIED", new, cur)

    def delete(self, res, ns, name, opts, dry_run=False):
        """DELETE: graceful for pods (deletionTimestamp; the kubelet removes it), at once for the rest."""
        with self.lock:
            cur = self.objects[res.key].get((ns or "", name))
            if cur is None:
                raise err_not_found(res, name)
            cm = meta(cur)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != cm.get("uid"):
                raise err_conflict(res, name, "Precondition failed: UID in precondition: %s, UID in object meta: "
                                   "%s" % (pre["uid"], cm.get("uid")))
            if pre.get("resourceVersion") and pre["resourceVersion"] != cm.get("resourceVersion"):
                raise err_conflict(res, name, "Precondition failed: ResourceVersion in precondition: %s, "
                                   "ResourceVersion in object meta: %s" % (pre["resourceVersion"],
                                                                          cm.get("resourceVersion")))
            policy = opts.get("propagationPolicy") or ("Orphan" if opts.get("orphanDependents") else "Background")
            if dry_run:
                return copy.deepcopy(cur), 200
            if policy == "Orphan":
                self._orphan(cm.get("uid"))
            grace = opts.get("gracePeriodSeconds")
            if res is R_POD:
                if grace is None:
                    grace = dig(cur, "spec", "terminationGracePeriodSeconds", default=30)
                grace = max(0, int(grace))
                if grace == 0:
                    return self.remove(res, ns, name), 200
                old_grace = cm.get("deletionGracePeriodSeconds")
                if old_grace is not None and grace >= old_grace:
                    return copy.deepcopy(cur), 200  # a grace period can only be shortened
                return self.mutate(res, ns, name, lambda o: meta(o).update(
                    deletionTimestamp=now_ts(time.time() + grace), deletionGracePeriodSeconds=grace)), 200
            if res is R_NS or policy == "Foreground" or cm.get("finalizers"):
                # kept until the garbage collector or the namespace controller is done with it
                def mark(o):
                    om = meta(o)
                    om.setdefault("deletionTimestamp", now_ts())
                    om.setdefault("deletionGracePeriodSeconds", 0)
                    if policy == "Foreground" and res is not R_NS:
                        om["finalizers"] = list(dict.fromkeys((om.get("finalizers") or []) + ["foregroundDeletion"]))
                    if res is R_NS:
                        o.setdefault("status", {})["phase"] = "Terminating"
                return self.mutate(res, ns, name, mark), 200
            return self.remove(res, ns, name), 200

    def remove(self, res, ns, name, uid=None):
        """Drop the object now (a DELETED event): the end of a graceful delete."""
        with self.lock:
            cur = self.objects[res.key].get((ns or "", name))
            if cur is None or (uid and meta(cur).get("uid") != uid):
                return None
            return self._commit(res, "DELETED", copy.deepcopy(cur), cur)

    def _orphan(self, uid):
        for r in RESOURCES:
            for o in self.all(r):
                refs = meta(o).get("ownerReferences") or []
                if any(ref.get("uid") == uid for ref in refs):
                    m = meta(o)
                    self.mutate(r, m.get("namespace"), m["name"], lambda x: meta(x).update(
                        ownerReferences=[ref for ref in refs if ref.get("uid") != uid]))

    # -- watching

    def watch(self, watcher, since, end_bookmark=None):
        """Register a watch: queue its initial events (ADDED for all, or the history after `since`)."""
        with self.lock:
            if since is None:
                for o in self.all(watcher.res, watcher.ns):
                    if watcher.matches(o):
                        watcher.put("ADDED", copy.deepcopy(o))
                if end_bookmark is not None:
                    meta(end_bookmark)["resourceVersion"] = str(self.rv)
                    watcher.put("BOOKMARK", end_bookmark)
            else:
                if since < self.compacted:
                    raise ApiError(410, "Expired", "too old resource version: %d (%d)" % (since, self.compacted))
                for ev in self.history:
                    if ev.rv > since:
                        watcher.offer(ev)
            self.watchers.add(watcher)

    def unwatch(self, watcher):
        with self.lock:
            self.watchers.discard(watcher)

    def compact(self):
        with self.lock:
            self.history.clear()
            self.compacted = self.rv
            return self.rv


def pod_spec_defaults(spec):
    """The defaults the real server fills into a pod spec (so -o yaml and apply look as usual)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        img = c.get("image", "")
        c.setdefault("imagePullPolicy", "Always" if ":" not in img.rsplit("/", 1)[-1] or img.endswith(":latest")
                     else "IfNotPresent")
        c.setdefault("resources", {})
        for p in c.get("ports") or []:
            p.setdefault("protocol", "TCP")
        for pk in ("readinessProbe", "livenessProbe", "startupProbe"):
            if isinstance(c.get(pk), dict):
                for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                             ("failureThreshold", 3)):
                    c[pk].setdefault(k, v)


def normalize(res, obj, old):
    """What every write does to an object of this kind (create and update)."""
    if res is R_SECRET:
        sd = obj.pop("stringData", None)
        if isinstance(sd, dict):
            data = obj.setdefault("data", {}) or {}
            obj["data"] = data
            for k, v in sd.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        obj.setdefault("type", "Opaque")
    elif res is R_SVC:
        spec = obj.setdefault("spec", {})
        if old is not None and not spec.get("clusterIP"):
            for k in ("clusterIP", "clusterIPs"):
                if dig(old, "spec", k) is not None:
                    spec[k] = copy.deepcopy(old["spec"][k])
    elif res is R_STS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)


def _decoded_len(v):
    """Bytes a base64 []byte field holds (what the real server's validation counts)."""
    if not isinstance(v, str):
        return len(dumps(v))
    try:
        return len(base64.b64decode(v, validate=True))
    except ValueError:
        return len(v) * 3 // 4


class Schemas:
    """The Kubernetes OpenAPI schemas of the stored kinds (kubernetes-models, in tools/), through one node process
    running schemas.mjs beside this file: check(obj) gives ajv's errors ([] when valid), or None where no schema
    covers the object's kind. A validator that stops answering (10 s) or exits is an error, never a pass."""

    def __init__(self, models):
        self.models = models
        self.lock = threading.Lock()
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas.mjs"),
                                      self.models], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buf = b""

    def _fail(self, why):
        """A validator that stalled or died is replaced (a late answer must not pass for the next object's)."""
        self.close()
        self._start()
        raise RuntimeError("the schema validator %s" % why)

    def check(self, obj):
        with self.lock:
            try:
                self.proc.stdin.write(dumps(obj).encode() + b"\n")
                self.proc.stdin.flush()
            except OSError as e:  # not a client's broken pipe: the validator's (a 500, never a dropped answer)
                self._fail("is gone (%s)" % e)
            deadline = time.monotonic() + 10
            fd = self.proc.stdout.fileno()
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    self._fail("did not answer within 10 s")
                chunk = os.read(fd, 65536)
                if not chunk:
                    self._fail("exited (%s)" % self.proc.poll())
                self.buf += chunk
            line, _, self.buf = self.buf.partition(b"\n")
        answer = json.loads(line)
        return None if answer.get("covered") is False else answer["errors"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.kill()
            self.proc.wait(5)


SCHEMAS = None  # a Schemas, unless --schemas off


def _field_path(pointer, extra=None):
    """A JSON pointer as the API's field paths say it: /spec/containers/0/image -> spec.containers[0].image."""
    out = ""
    for part in [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]] + ([extra] if extra else []):
        out += "[%s]" % part if part.isdigit() else ("." if out else "") + part
    return out


def _at(obj, pointer):
    """The value at a JSON pointer into obj (None where there is none)."""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        obj = (obj[int(part)] if part.isdigit() and int(part) < len(obj) else None) if isinstance(obj, list) else \
            obj.get(part) if isinstance(obj, dict) else None
    return obj


def _json_type(v):
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(v), "value")


def check_schema(res, obj):
    """The object against its kind's schema, as the real server decodes and validates it: a value of the wrong type
    is a 400 (its decoding fails: "cannot unmarshal"), a missing required field, a value outside an enum or another
    constraint a 422 Invalid with one cause each."""
    errors = SCHEMAS.check(obj) if SCHEMAS else None
    if not errors:
        return
    name = meta(obj).get("name", "")
    for e in errors:
        if e["keyword"] in ("type", "format"):
            field = _field_path(e["path"])
            raise err_bad('%s in version "%s" cannot be handled as a %s: json: cannot unmarshal %s into Go struct '
                          'field .%s of type %s' % (res.kind, res.version, res.kind, _json_type(_at(obj, e["path"])),
                                                    re.sub(r"\[\d+\]", "", field),
                                                    e["params"].get("type") or e["params"].get("format")))
    causes = []
    for e in errors:
        if e["keyword"] == "required":
            causes.append((_field_path(e["path"], e["params"]["missingProperty"]), "Required value"))
        elif e["keyword"] == "enum":
            causes.append((_field_path(e["path"]), "Unsupported value: %s: supported values: %s" % (
                dumps(_at(obj, e["path"])), ", ".join('"%s"' % v for v in e["params"]["allowedValues"]))))
        else:
            causes.append((_field_path(e["path"]), "Invalid value: %s" % e["message"]))
    raise err_invalid(res, name, causes)


def validate(res, obj):
    """What the real server's validation rejects beyond names (create and update): what its schema does not allow
    (check_schema), a ConfigMap's or a Secret's data over 1 MiB (the sum of the values' sizes: `data` strings in
    UTF-8, `binaryData` and Secret `data` decoded; keys do not count), a Lease's non-positive duration or negative
    transitions."""
    check_schema(res, obj)
    bag = lambda k: obj.get(k) if isinstance(obj.get(k), dict) else {}
    causes = []
    if res is R_CM:
        total = sum(len(v.encode()) if isinstance(v, str) else len(dumps(v)) for v in bag("data").values())
        total += sum(_decoded_len(v) for v in bag("binaryData").values())
        if total > MAX_DATA_SIZE:  # field.TooLong(field.NewPath(""), ...): the whole object, printed "[]"
            causes.append(("[]", "Too long: must have at most %d bytes" % MAX_DATA_SIZE))
    elif res is R_SECRET:
        if sum(_decoded_len(v) for v in bag("data").values()) > MAX_DATA_SIZE:
            causes.append(("data", "Too long: must have at most %d bytes" % MAX_DATA_SIZE))
    elif res is R_LEASE:
        spec = bag("spec")
        d, t = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
        if isinstance(d, int) and d <= 0:
            causes.append(("spec.leaseDurationSeconds", "Invalid value: %d: must be greater than 0" % d))
        if isinstance(t, int) and t < 0:
            causes.append(("spec.leaseTransitions", "Invalid value: %d: must be greater than or equal to 0" % t))
    if causes:
        raise err_invalid(res, meta(obj).get("name", ""), causes)


def defaults(res, obj, store):
    """Create-time defaults and allocations."""
    normalize(res, obj, None)
    m = meta(obj)
    if res is R_NS:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        m.setdefault("labels", {})["kubernetes.io/metadata.name"] = m["name"]
    elif res is R_POD:
        spec = obj.setdefault("spec", {})
        pod_spec_defaults(spec)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("nodeName", NODE_NAME)  # the "scheduler" binds every pod at once, to the one node
        service_account_admission(obj, store)
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif res is R_SVC:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = cluster_ip(store, m.get("name", ""), spec.get("clusterIP"))
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
            if spec["type"] in ("NodePort", "LoadBalancer") and not p.get("nodePort"):
                store.ip_counter += 1
                p["nodePort"] = 30000 + store.ip_counter % 2768
        obj["status"] = {"loadBalancer": {}}
    elif res is R_STS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
        pod_spec_defaults(spec.setdefault("template", {}).setdefault("spec", {}))
        obj["status"] = {"replicas": 0, "availableReplicas": 0}
    elif res is R_RS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        pod_spec_defaults(spec.setdefault("template", {}).setdefault("spec", {}))
        obj["status"] = {"replicas": 0}
    elif res is R_DEPLOY:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        pod_spec_defaults(spec.setdefault("template", {}).setdefault("spec", {}))
        obj["status"] = {}
    elif res is R_SA:
        pass


def after_create(res, obj, store):
    if res is R_NS:  # the service account controller's "default", the root CA publisher's kube-root-ca.crt
        name = meta(obj)["name"]
        if store.peek(R_SA, name, "default") is None:
            store.create(R_SA, name, {"metadata": {"name": "default"}}, internal=True)
        if store.peek(R_CM, name, "kube-root-ca.crt") is None:
            store.create(R_CM, name, {"metadata": {"name": "kube-root-ca.crt", "annotations": {
                "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver "
                                             "when using internal endpoints such as the internal service IP or "
                                             "kubernetes.default.svc. No other usage is guaranteed across "
                                             "distributions of Kubernetes clusters."}},
                "data": {"ca.crt": CA_PEM}}, internal=True)


def service_account_admission(pod, store):
    """The ServiceAccount admission plugin: the pod's service account must exist; unless
    automountServiceAccountToken is false (the pod's, else the ServiceAccount's), a projected volume
    kube-api-access-XXXXX (a token bound to the pod, the kube-root-ca.crt ConfigMap's ca.crt, the namespace)
    mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount in every container."""
    m, spec = meta(pod), pod["spec"]
    ns, name, sa_name = m.get("namespace", ""), m.get("name", ""), spec["serviceAccountName"]
    sa = store.peek(R_SA, ns, sa_name)
    if sa is None:
        raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: error looking up service account %s/%s: '
                       'serviceaccount "%s" not found' % (name, ns, sa_name, sa_name),
                       {"name": name, "kind": "pods"})
    auto = spec.get("automountServiceAccountToken")
    if auto is None:
        auto = sa.get("automountServiceAccountToken")
    if auto is False:
        return
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    if all(any(vm.get("mountPath", "").rstrip("/") == SA_DIR for vm in c.get("volumeMounts") or [])
           for c in containers):
        return
    vname = "kube-api-access-" + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    spec.setdefault("volumes", []).append({"name": vname, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}}]}})
    for c in containers:
        if not any(vm.get("mountPath", "").rstrip("/") == SA_DIR for vm in c.get("volumeMounts") or []):
            c.setdefault("volumeMounts", []).append({"name": vname, "readOnly": True, "mountPath": SA_DIR})


def pod_token(ns, sa, uid):
    """The token of the pod uid's projected serviceAccountToken (one per pod, minted on first use)."""
    with POD_TOKENS_LOCK:
        for t, who in POD_TOKENS.items():
            if who == (ns, sa, uid):
                return t
        t = "apisim-sa-" + uuid.uuid4().hex + uuid.uuid4().hex
        POD_TOKENS[t] = (ns, sa, uid)
        return t


def _ip4(ip):
    mm = re.match(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$", ip or "")
    return [int(x) for x in mm.groups()] if mm and all(int(x) < 256 for x in mm.groups()) else None


def cluster_ip(store, name, want):
    """A Service's clusterIP: the one asked for (any 127.x.y.z outside 127.0.0.0/24 that no pod or other Service
    has), else the lowest free one from --service-ip-start. The kube-proxy listens there."""
    used = {dig(o, "spec", "clusterIP") for o in store.all(R_SVC)} | {dig(o, "status", "podIP")
                                                                       for o in store.all(R_POD)}
    if want:
        q = _ip4(want)
        if q is None or q[0] != 127 or (q[1] == 0 and q[2] == 0) or q[3] in (0, 255):
            raise err_invalid(R_SVC, name, [("spec.clusterIPs", 'Invalid value: []string{"%s"}: failed to allocate '
                                             'IP %s: the provided IP (%s) is not in the valid range. The range of '
                                             'valid IPs is 127.0.0.0/8 (not 127.0.0.0/24)' % (want, want, want))])
        if want in used:
            raise err_invalid(R_SVC, name, [("spec.clusterIPs", 'Invalid value: []string{"%s"}: failed to allocate '
                                             'IP %s: provided IP is already allocated' % (want, want))])
        return want
    b = _ip4(OPT.service_ip_start if OPT else "127.1.0.1")
    n = (b[1] << 16) | (b[2] << 8) | b[3]
    while n < 1 << 24:
        ip = "127.%d.%d.%d" % ((n >> 16) & 255, (n >> 8) & 255, n & 255)
        if (n & 255) not in (0, 255) and ip not in used:
            return ip
        n += 1
    raise ApiError(500, "InternalError", "no free cluster IP")


# ==== watch hub =====================================================================================

DROP = object()  # queued to a watch: close its connection abruptly


class Watcher:
    """One open watch: a filter over the store's events and the queue its connection drains."""
    counter = 0

    def __init__(self, res, ns, lsel, fsel, conn):
        Watcher.counter += 1
        self.id = Watcher.counter
        self.res, self.ns, self.lsel, self.fsel, self.conn = res, ns, lsel, fsel, conn
        self.q = queue.Queue()
        self.rng = random.Random("%s-%d" % (OPT.seed if OPT else 0, self.id))

    def matches(self, obj):
        if obj is None:
            return False
        if self.ns is not None and meta(obj).get("namespace", "") != self.ns:
            return False
        return self.lsel.matches(meta(obj).get("labels")) and self.fsel.matches(obj)

    def put(self, type_, obj):
        self.q.put((type_, obj))

    def offer(self, ev):
        """Translate one change for this watch (real semantics: an object that stops matching is DELETED)."""
        if ev.key != self.res.key or (self.ns is not None and ev.ns != self.ns):
            return
        cur = ev.type != "DELETED" and self.matches(ev.obj)
        old = self.matches(ev.old)
        if cur and not old:
            self.put("ADDED", ev.obj)
        elif cur and old:
            self.put("MODIFIED", ev.obj)
        elif old:
            gone = copy.deepcopy(ev.old)
            meta(gone)["resourceVersion"] = str(ev.rv)  # the previous content, at the event's version
            self.put("DELETED", gone)

    def drop(self):
        """Abort the connection: shutdown(2) from this thread ends a blocked write; the queue wakes a reader."""
        self.q.put(DROP)
        try:
            socket.socket.shutdown(self.conn, socket.SHUT_RDWR)
        except OSError:
            pass


def drop_watches(store):
    with store.lock:
        ws = list(store.watchers)
    for w in ws:
        w.drop()
    return len(ws)


# ==== tables and discovery ==========================================================================

def col(name, type_="string", priority=0, fmt="", desc=""):
    return {"name": name, "type": type_, "format": fmt, "description": desc or name, "priority": priority}


def pod_status_text(pod):
    """kubectl's STATUS column for a pod (printPod, abridged)."""
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Pending"
    inits = dig(pod, "spec", "initContainers", default=[]) or []
    initializing = False
    for i, cs in enumerate(st.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        t, w = state.get("terminated"), state.get("waiting")
        if t and t.get("exitCode") == 0:
            continue
        if t:
            reason = "Init:" + (t.get("reason") or ("Signal:%d" % t["signal"] if t.get("signal") else
                                                     "ExitCode:%d" % t.get("exitCode", 0)))
        elif w and w.get("reason") and w["reason"] != "PodInitializing":
            reason = "Init:" + w["reason"]
        else:
            reason = "Init:%d/%d" % (i, len(inits))
        initializing = True
        break
    if not initializing:
        has_running = False
        for cs in reversed(st.get("containerStatuses") or []):
            state = cs.get("state") or {}
            w, t = state.get("waiting"), state.get("terminated")
            if w and w.get("reason"):
                reason = w["reason"]
            elif t and t.get("reason"):
                reason = t["reason"]
            elif t:
                reason = "Signal:%d" % t["signal"] if t.get("signal") else "ExitCode:%d" % t.get("exitCode", 0)
            elif state.get("running") and cs.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            reason = "Running" if ready else "NotReady"
    if meta(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def table_columns(res):
    age = col("Age", desc="CreationTimestamp is a timestamp representing the server time when this object was "
                          "created.")
    name = col("Name", fmt="name", desc="Name must be unique within a namespace.")
    if res is R_POD:
        return [name, col("Ready"), col("Status"), col("Restarts", "string"), age, col("IP", priority=1),
                col("Node", priority=1), col("Nominated Node", priority=1), col("Readiness Gates", priority=1)]
    if res is R_STS:
        return [name, col("Ready"), age, col("Containers", priority=1), col("Images", priority=1)]
    if res is R_DEPLOY:
        return [name, col("Ready"), col("Up-to-date", "integer"), col("Available", "integer"), age,
                col("Containers", priority=1), col("Images", priority=1), col("Selector", priority=1)]
    if res is R_RS:
        return [name, col("Desired", "integer"), col("Current", "integer"), col("Ready", "integer"), age,
                col("Containers", priority=1), col("Images", priority=1), col("Selector", priority=1)]
    if res is R_SVC:
        return [name, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), age,
                col("Selector", priority=1)]
    if res is R_CM:
        return [name, col("Data", "integer"), age]
    if res is R_SECRET:
        return [name, col("Type"), col("Data", "integer"), age]
    if res is R_NS:
        return [name, col("Status"), age]
    if res is R_LEASE:
        return [name, col("Holder"), age]
    if res is R_PDB:
        return [name, col("Min Available"), col("Max Unavailable"), col("Allowed Disruptions", "integer"), age]
    if res.plural == "events":
        return [col("Last Seen"), col("Type"), col("Reason"), col("Object"), col("Subobject", priority=1),
                col("Source", priority=1), col("Message"), col("First Seen", priority=1),
                col("Count", "integer", priority=1), col("Name", priority=1)]
    return [name, age]


def table_cells(res, o):
    m = meta(o)
    name, age = m.get("name", ""), age_of(m.get("creationTimestamp"))
    spec, st = o.get("spec") or {}, o.get("status") or {}
    if res is R_POD:
        css = st.get("containerStatuses") or []
        ready = sum(1 for c in css if c.get("ready"))
        restarts = sum(c.get("restartCount", 0) for c in css)
        last = max((parse_ts(dig(c, "lastState", "terminated", "finishedAt")) or 0 for c in css), default=0)
        rtext = "%d (%s ago)" % (restarts, human_age(time.time() - last)) if restarts and last else str(restarts)
        return [name, "%d/%d" % (ready, len(spec.get("containers") or [])), pod_status_text(o), rtext, age,
                st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]
    if res in (R_STS, R_DEPLOY, R_RS):
        cs = dig(spec, "template", "spec", "containers", default=[]) or []
        names, images = ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)
        if res is R_RS:
            return [name, spec.get("replicas", 1), st.get("replicas", 0), st.get("readyReplicas", 0), age, names,
                    images, selector_from_label_selector(spec.get("selector")) or "<none>"]
        ready = "%d/%d" % (st.get("readyReplicas", 0), spec.get("replicas", 1))
        if res is R_STS:
            return [name, ready, age, names, images]
        return [name, ready, st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age, names, images,
                selector_from_label_selector(spec.get("selector")) or "<none>"]
    if res is R_SVC:
        ports = ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP")) for p in spec.get("ports") or [])
        sel = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items()))
        return [name, spec.get("type", "ClusterIP"), spec.get("clusterIP", "<none>"), "<none>", ports or "<none>",
                age, sel or "<none>"]
    if res is R_CM:
        return [name, len(o.get("data") or {}) + len(o.get("binaryData") or {}), age]
    if res is R_SECRET:
        return [name, o.get("type", "Opaque"), len(o.get("data") or {}), age]
    if res is R_NS:
        return [name, st.get("phase", "Active"), age]
    if res is R_LEASE:
        return [name, spec.get("holderIdentity") or "", age]
    if res is R_PDB:
        na = lambda v: "N/A" if v is None else str(v)
        return [name, na(spec.get("minAvailable")), na(spec.get("maxUnavailable")), st.get("disruptionsAllowed", 0),
                age]
    if res.plural == "events":
        inv = o.get("involvedObject") or o.get("regarding") or {}
        last = o.get("lastTimestamp") or o.get("eventTime") or dig(o, "series", "lastObservedTime") or \
            m.get("creationTimestamp")
        first = o.get("firstTimestamp") or o.get("eventTime") or m.get("creationTimestamp")
        src = dig(o, "source", "component") or o.get("reportingComponent") or o.get("reportingController") or ""
        return [age_of(last), o.get("type", ""), o.get("reason", ""),
                "%s/%s" % ((inv.get("kind") or "").lower(), inv.get("name", "")), inv.get("fieldPath", ""), src,
                o.get("message") or o.get("note") or "", age_of(first), o.get("count", 1), name]
    return [name, age]


def row_object(res, o, include):
    if include == "None":
        return None
    if include == "Object":
        full = copy.deepcopy(o)
        full["apiVersion"], full["kind"] = res.api_version, res.kind
        return full
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": copy.deepcopy(meta(o))}


def to_table(res, objs, include, rv, columns=True):
    rows = []
    for o in objs:
        row = {"cells": table_cells(res, o)}
        ro = row_object(res, o, include)
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": table_columns(res) if columns else [], "rows": rows}


def api_resource_list(group, version):
    out = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        verbs = [v for v in ALL_VERBS if not (v == "deletecollection" and r.plural in ("namespaces", "nodes"))]
        d = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
             "verbs": verbs}
        if r.short:
            d["shortNames"] = r.short
        if r.categories:
            d["categories"] = r.categories
        d["storageVersionHash"] = base64.b64encode(hashlib.sha256(r.gr.encode()).digest()[:8]).decode()
        out.append(d)
        for name, g, v, kind, verbs in r.subresources:
            s = {"name": "%s/%s" % (r.plural, name), "singularName": "", "namespaced": r.namespaced,
                 "kind": kind or r.kind, "verbs": verbs}
            if g is not None:
                s["group"], s["version"] = g, v
            out.append(s)
    gv = version if not group else "%s/%s" % (group, version)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


def api_group(group):
    vs = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in GROUPS[group]]
    return {"name": group, "versions": vs, "preferredVersion": vs[0]}


def openapi_v3_root():
    paths = {}
    for g, vs in GROUPS.items():
        for v in vs:
            p = "api/%s" % v if not g else "apis/%s/%s" % (g, v)
            paths[p] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (p, openapi_hash(g, v))}
    return {"paths": paths}


def openapi_hash(group, version):
    return hashlib.sha512(dumps(openapi_v3_doc(group, version)).encode()).hexdigest()[:64].upper()


def openapi_v3_doc(group, version):
    """Just enough OpenAPI v3 for kubectl: each PATCH operation names its kind and the fieldValidation parameter,
    so `kubectl apply` (--validate=strict) asks the server to validate instead of fetching schemas. No schemas:
    kubectl then computes strategic merge patches from its built-in types."""
    paths = {}
    fv = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
          "description": "Strict, Warn or Ignore: the simulator accepts all three and does not reject unknown "
                         "fields."}
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        prefix = "/api/%s" % version if not group else "/apis/%s/%s" % (group, version)
        base = prefix + ("/namespaces/{namespace}/%s" % r.plural if r.namespaced else "/%s" % r.plural)
        gvk = {"group": group, "version": version, "kind": r.kind}
        op = lambda verb: {"operationId": "%s%s" % (verb, r.kind), "x-kubernetes-action": verb,
                           "x-kubernetes-group-version-kind": gvk, "parameters": [fv],
                           "responses": {"200": {"description": "OK"}}}
        paths[base] = {"post": op("post"), "get": op("list")}
        paths[base + "/{name}"] = {"get": op("get"), "put": op("put"), "patch": op("patch"),
                                   "delete": op("delete")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (apisim)", "version": K8S_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


# ==== authentication and RBAC =======================================================================

class User:
    def __init__(self, name, groups, admin=False):
        self.name, self.groups, self.admin = name, list(groups), admin


ADMIN = User("system:admin", ["system:masters", "system:authenticated"], admin=True)


def sa_user(ns, sa):
    return User("system:serviceaccount:%s:%s" % (ns, sa),
                ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"])


# system:discovery, system:basic-user and system:public-info-viewer, bound to system:authenticated
DISCOVERY_RULES = [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                                                          "/livez", "/openapi", "/openapi/*", "/readyz",
                                                          "/version", "/version/"]}]


def request_info(method, path, q):
    """The attributes the real server authorizes (RequestInfoFactory): verb, API group, namespace, resource,
    subresource, name; or, outside /api/V/... and /apis/G/V/..., a non-resource path and the method as verb."""
    ri = {"resource_request": False, "verb": method.lower(), "path": path, "group": "", "ns": "", "resource": "",
          "sub": "", "name": ""}
    parts = [p for p in path.split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return ri
    parts = parts[1:]
    if ri["path"].startswith("/apis/"):
        if len(parts) < 3:
            return ri
        ri["group"], parts = parts[0], parts[1:]
    ri["resource_request"] = True
    parts = parts[1:]  # the version
    if parts[0] in ("watch", "proxy"):
        ri["verb"], parts = parts[0], parts[1:]
        if not parts:
            return ri
    else:
        ri["verb"] = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                      "DELETE": "delete"}.get(method, "")
    if parts[0] == "namespaces":
        if len(parts) > 1:
            ri["ns"] = parts[1]
            if len(parts) > 2 and parts[2] not in ("status", "finalize"):
                parts = parts[2:]
    ri["resource"] = parts[0]
    if len(parts) >= 2:
        ri["name"] = parts[1]
    if len(parts) >= 3 and ri["verb"] != "proxy":
        ri["sub"] = parts[2]
    if not ri["name"] and ri["verb"] == "get":
        ri["verb"] = "watch" if q.get("watch") in ("1", "true", "True") else "list"
        # fieldSelector=metadata.name=X names the object, so resourceNames can allow a list or watch of it
        for term in (q.get("fieldSelector") or "").split(","):
            m = re.match(r"^\s*metadata\.name\s*==?\s*([^=!]+?)\s*$", term)
            if m and DNS1123_SUB.match(m.group(1)):
                ri["name"] = m.group(1)
    if not ri["name"] and ri["verb"] == "delete":
        ri["verb"] = "deletecollection"
    return ri


def rule_allows(rule, ri):
    """rbac.RuleAllows: verbs, apiGroups, resources (with `*/sub`), resourceNames; or nonResourceURLs."""
    has = lambda field, v: any(x == "*" or x == v for x in rule.get(field) or [])
    if not has("verbs", ri["verb"]):
        return False
    if not ri["resource_request"]:
        return any(u == "*" or u == ri["path"] or (u.endswith("*") and ri["path"].startswith(u[:-1]))
                   for u in rule.get("nonResourceURLs") or [])
    combined = ri["resource"] + ("/" + ri["sub"] if ri["sub"] else "")
    if not has("apiGroups", ri["group"]):
        return False
    if not any(r in ("*", combined) or (ri["sub"] and r == "*/" + ri["sub"]) for r in rule.get("resources") or []):
        return False
    names = rule.get("resourceNames") or []
    return not names or ri["name"] in names  # never a create, or a list or watch of all, by resourceNames


def subject_matches(subj, user, ns):
    kind, name = subj.get("kind"), subj.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sns = subj.get("namespace") or ns
        return bool(sns) and user.name == "system:serviceaccount:%s:%s" % (sns, name)
    return False


def authorize(store, user, ri):
    """RBAC over the stored ClusterRoleBindings, then the RoleBindings of the request's namespace: (allowed,
    reason); the reason names roles that bindings applying to the user refer to but that do not exist."""
    if user.admin:
        return True, ""
    if "system:authenticated" in user.groups and any(rule_allows(r, ri) for r in DISCOVERY_RULES):
        return True, ""
    errors = []
    bindings = [(b, "") for b in store.all(R_CRB)]
    if ri["ns"]:
        bindings += [(b, ri["ns"]) for b in store.all(R_RB, ri["ns"])]
    for b, ns in bindings:
        if not any(subject_matches(s, user, ns) for s in b.get("subjects") or [] if isinstance(s, dict)):
            continue
        ref = b.get("roleRef") or {}
        if ref.get("kind") == "Role" and ns:
            role, what = store.peek(R_ROLE, ns, ref.get("name", "")), "role"
        else:
            role, what = store.peek(R_CROLE, None, ref.get("name", "")), "clusterrole"
        if role is None:
            errors.append('%s.rbac.authorization.k8s.io "%s" not found' % (what, ref.get("name", "")))
            continue
        if any(rule_allows(r, ri) for r in role.get("rules") or [] if isinstance(r, dict)):
            return True, ""
    if not errors:
        return False, ""
    return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


# ==== controllers ===================================================================================

def is_terminating(o):
    return bool(meta(o).get("deletionTimestamp"))


def pod_ready(p):
    return p.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in p.get("status", {}).get("conditions") or [])


def owned_by(o, uid):
    return any(r.get("uid") == uid for r in meta(o).get("ownerReferences") or [])


def template_hash(tmpl):
    return hashlib.sha256(dumps(tmpl).encode()).hexdigest()[:10]


def pod_template_hash(tmpl):
    """A Deployment's pod-template-hash: up to 10 characters of the safe alphabet the real one uses."""
    n = int(hashlib.sha256(dumps(tmpl).encode()).hexdigest()[:12], 16)
    alphabet, out = "bcdfghjklmnpqrstvwxz2456789", ""
    while n and len(out) < 10:
        n, r = divmod(n, len(alphabet))
        out += alphabet[r]
    return out or "b"


def percent_of(v, total, round_up):
    """An IntOrString like maxUnavailable ("25%" or 1) of total."""
    if isinstance(v, str) and v.endswith("%"):
        x = total * int(v[:-1] or 0) / 100.0
        return int(-(-x // 1)) if round_up else int(x)
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


PDB_DELETION_TIMEOUT = 120  # seconds a disrupted pod is expected to go within (the controller's DeletionTimeout)


def pdb_pods(store, pdb):
    """The pods of the budget's namespace its selector matches (policy/v1: an empty selector matches all)."""
    ns, sel = meta(pdb).get("namespace"), dig(pdb, "spec", "selector")
    if sel is None and pdb.get("apiVersion") == "policy/v1beta1":
        return []
    lsel = LabelSelector(selector_from_label_selector(sel or {}))
    return [p for p in store.all(R_POD, ns) if lsel.matches(meta(p).get("labels"))]


def pdb_expected(store, pods):
    """The scale of the pods' controllers (StatefulSet, ReplicaSet, ...), each counted once."""
    seen, total = set(), 0
    for p in pods:
        for ref in meta(p).get("ownerReferences") or []:
            if not ref.get("controller") or ref.get("uid") in seen:
                continue
            seen.add(ref.get("uid"))
            r = {"StatefulSet": R_STS, "ReplicaSet": R_RS, "Deployment": R_DEPLOY}.get(ref.get("kind"))
            o = store.peek(r, meta(p).get("namespace"), ref.get("name")) if r else None
            if o is not None and meta(o).get("uid") == ref.get("uid"):
                total += dig(o, "spec", "replicas", default=1)
    return total


def pdb_status(store, pdb):
    """What the disruption controller writes: expected, desired and current healthy pods, disruptions allowed,
    the disrupted pods not yet seen going, the DisruptionAllowed condition."""
    spec, old = pdb.get("spec") or {}, pdb.get("status") or {}
    pods = pdb_pods(store, pdb)
    now = time.time()
    disrupted = {}
    live = {meta(p)["name"]: p for p in pods if not is_terminating(p)}
    for name, ts in (old.get("disruptedPods") or {}).items():  # a pod of that name made since is another
        t = parse_ts(ts) or 0
        if name in live and t + PDB_DELETION_TIMEOUT > now and (parse_ts(meta(live[name]).get(
                "creationTimestamp")) or 0) < t:
            disrupted[name] = ts
    max_u, min_a = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_u is not None:
        expected = pdb_expected(store, pods)
        desired = max(0, expected - percent_of(max_u, expected, True))
    elif isinstance(min_a, str) and min_a.endswith("%"):
        expected = pdb_expected(store, pods)
        desired = percent_of(min_a, expected, True)
    else:
        expected, desired = len(pods), percent_of(min_a, len(pods), True) if min_a is not None else 0
    healthy = sum(1 for n, p in live.items() if n not in disrupted and pod_ready(p))
    allowed = max(0, healthy - desired)
    ok = allowed > 0
    cond = {"type": "DisruptionAllowed", "status": "True" if ok else "False",
            "reason": "SufficientPods" if ok else "InsufficientPods", "message": "",
            "observedGeneration": meta(pdb).get("generation", 1)}
    prev = [c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"]
    cond["lastTransitionTime"] = prev[0].get("lastTransitionTime") if prev and \
        prev[0].get("status") == cond["status"] else now_ts()
    st = {"observedGeneration": meta(pdb).get("generation", 1), "disruptionsAllowed": allowed,
          "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected, "conditions": [cond]}
    if disrupted:
        st["disruptedPods"] = disrupted
    return st


def record_event(store, involved, reason, message, type_="Normal", component="apisim"):
    """A core Event about an object, deduplicated by (object, reason, message) like the real recorder."""
    m = meta(involved)
    ns = m.get("namespace") or "default"
    now = now_ts()
    for ev in store.all(R_EVENT, ns):
        if dig(ev, "involvedObject", "uid") == m.get("uid") and ev.get("reason") == reason and \
                ev.get("message") == message:
            store.mutate(R_EVENT, ns, meta(ev)["name"], lambda e: e.update(count=e.get("count", 1) + 1,
                                                                            lastTimestamp=now))
            return
    try:
        store.create(R_EVENT, ns, {
            "metadata": {"name": "%s.%x" % (m.get("name"), int(time.time() * 1e9) + random.randrange(1 << 20))},
            "involvedObject": {"kind": involved.get("kind"), "namespace": ns, "name": m.get("name"),
                               "uid": m.get("uid"), "apiVersion": involved.get("apiVersion"),
                               "resourceVersion": m.get("resourceVersion")},
            "reason": reason, "message": message, "type": type_, "count": 1, "firstTimestamp": now,
            "lastTimestamp": now, "source": {"component": component}, "reportingComponent": component},
            internal=True)
    except ApiError:
        pass


class Controllers(threading.Thread):
    """The StatefulSet and Deployment controllers, the garbage collector and the namespace controller.

    Level-triggered: every pass looks at the whole store (small in tests) and writes only what differs, so
    a pass with nothing to do writes nothing and the loop settles."""

    def __init__(self, store, stop):
        threading.Thread.__init__(self, name="controllers", daemon=True)
        self.store, self.stop = store, stop
        self.kick = threading.Event()
        store.kicks.append(self.kick)

    def run(self):
        while not self.stop.is_set():
            self.kick.wait(0.5)
            self.kick.clear()
            try:
                for sts in self.store.all(R_STS):
                    if not is_terminating(sts):
                        self.statefulset(sts)
                for d in self.store.all(R_DEPLOY):
                    if is_terminating(d):
                        continue
                    if OPT.deployments == "run":
                        self.deployment(d)
                    else:
                        self.deployment_stored(d)
                for rs in self.store.all(R_RS):
                    if not is_terminating(rs):
                        self.replicaset(rs)
                for pdb in self.store.all(R_PDB):
                    if not is_terminating(pdb):
                        self.disruption_budget(pdb)
                self.garbage_collect()
                self.namespaces()
            except Exception:  # a controller bug must not stop the simulator: log it and go on
                traceback.print_exc()

    # -- PodDisruptionBudget (the disruption controller's status)

    def disruption_budget(self, pdb):
        m = meta(pdb)
        with self.store.lock:  # one consistent view of the pods, the budget and its controllers
            cur = self.store.peek(R_PDB, m.get("namespace"), m["name"])
            if cur is None or meta(cur).get("uid") != m.get("uid"):
                return
            status = pdb_status(self.store, cur)
            self.store.mutate(R_PDB, m.get("namespace"), m["name"], lambda o: o.update(status=status),
                              uid=m.get("uid"))

    # -- StatefulSet

    def statefulset(self, sts):
        st, m, spec = self.store, meta(sts), sts.get("spec") or {}
        ns, name, uid = m.get("namespace"), m["name"], m["uid"]
        replicas = spec.get("replicas", 1)
        tmpl = spec.get("template") or {}
        rev = "%s-%s" % (name, template_hash(tmpl))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        pods = {}
        for p in st.all(R_POD, ns):
            mm = re.match(r"^%s-(\d+)$" % re.escape(name), meta(p)["name"])
            if mm and owned_by(p, uid):
                pods[int(mm.group(1))] = p
        # ended pods are deleted, and made again below once gone
        for o, p in pods.items():
            if not is_terminating(p) and p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                self.delete_pod(sts, p)
        # missing ordinals
        for o in range(replicas):
            if o in pods:
                if not parallel and not (pod_ready(pods[o]) and not is_terminating(pods[o])):
                    break  # OrderedReady: the next one waits for this one to be Running and Ready
                continue
            if st.peek(R_POD, ns, "%s-%d" % (name, o)) is not None:
                if parallel:
                    continue  # a pod of that name (ours terminating, or someone else's) is in the way
                break
            self.create_pod(sts, o, rev)
            if not parallel:
                break
        # scale down: the highest ordinals first
        condemned = sorted((o for o, p in pods.items() if o >= replicas and not is_terminating(p)), reverse=True)
        if parallel:
            for o in condemned:
                self.delete_pod(sts, pods[o])
        elif condemned and not any(is_terminating(p) for p in pods.values()):
            self.delete_pod(sts, pods[condemned[0]])
        # rolling update: one outdated pod at a time, highest ordinal first, once the rest are ready
        strategy = spec.get("updateStrategy") or {}
        partition = dig(strategy, "rollingUpdate", "partition", default=0) or 0
        live = [pods.get(o) for o in range(replicas)]
        if strategy.get("type", "RollingUpdate") == "RollingUpdate" and all(
                p is not None and not is_terminating(p) and pod_ready(p) for p in live):
            old = [o for o in range(replicas - 1, partition - 1, -1)
                   if meta(live[o]).get("labels", {}).get("controller-revision-hash") != rev]
            if old:
                self.delete_pod(sts, live[old[0]])
        # status
        current = [p for o, p in pods.items() if not is_terminating(p)]
        updated = sum(1 for p in current if meta(p).get("labels", {}).get("controller-revision-hash") == rev)
        ready = sum(1 for p in current if pod_ready(p))
        old_status = sts.get("status") or {}
        cur_rev = rev if updated == len(current) else old_status.get("currentRevision", rev)
        status = {"observedGeneration": m.get("generation", 1), "replicas": len(current),
                  "availableReplicas": ready, "currentRevision": cur_rev, "updateRevision": rev, "collisionCount": 0}
        for k, v in (("readyReplicas", ready), ("updatedReplicas", updated),
                     ("currentReplicas", updated if cur_rev == rev else len(current) - updated)):
            if v:
                status[k] = v  # omitempty, as the real API serializes them
        if status != old_status:
            st.mutate(R_STS, ns, name, lambda o: o.update(status=status), uid=uid)

    def create_pod(self, sts, ordinal, rev):
        m, spec = meta(sts), sts.get("spec") or {}
        name = "%s-%d" % (m["name"], ordinal)
        tmpl = copy.deepcopy(spec.get("template") or {})
        tm = tmpl.get("metadata") or {}
        labels = dict(tm.get("labels") or {})
        labels.update({"statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(ordinal),
                       "controller-revision-hash": rev})
        pspec = tmpl.get("spec") or {}
        pspec["hostname"] = name
        if spec.get("serviceName"):
            pspec["subdomain"] = spec["serviceName"]
        vols = pspec.setdefault("volumes", [])
        for claim in spec.get("volumeClaimTemplates") or []:
            cn = meta(claim).get("name")
            if cn and not any(v.get("name") == cn for v in vols):
                vols.append({"name": cn, "persistentVolumeClaim": {"claimName": "%s-%s" % (cn, name)}})
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "generateName": m["name"] + "-", "labels": labels,
                            "annotations": dict(tm.get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": m["name"],
                                                 "uid": m["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": pspec}
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        try:
            self.store.create(R_POD, m["namespace"], pod, internal=True)
            record_event(self.store, sts, "SuccessfulCreate", "create Pod %s in StatefulSet %s successful"
                         % (name, m["name"]), component="statefulset-controller")
        except ApiError as e:
            log("statefulset %s: cannot create pod %s: %s" % (m["name"], name, e))

    def delete_pod(self, sts, pod):
        pm = meta(pod)
        try:
            self.store.delete(R_POD, pm["namespace"], pm["name"], {"preconditions": {"uid": pm["uid"]}})
            record_event(self.store, sts, "SuccessfulDelete", "delete Pod %s in StatefulSet %s successful"
                         % (pm["name"], meta(sts)["name"]), component="statefulset-controller")
        except ApiError:
            pass

    # -- Deployment: a ReplicaSet per pod template, DEPLOY-<pod-template-hash>

    def deployment(self, d):
        st, m, spec = self.store, meta(d), d.get("spec") or {}
        ns, name, uid = m.get("namespace"), m["name"], m["uid"]
        replicas = spec.get("replicas", 1)
        tmpl = spec.get("template") or {}
        phash = pod_template_hash(tmpl)
        rss = [rs for rs in st.all(R_RS, ns) if owned_by(rs, uid) and not is_terminating(rs)]
        new = next((rs for rs in rss if meta(rs).get("labels", {}).get("pod-template-hash") == phash), None)
        olds = [rs for rs in rss if rs is not new]
        rev = lambda rs: int(meta(rs).get("annotations", {}).get("deployment.kubernetes.io/revision", "0") or 0)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        active = lambda rs: [p for p in st.all(R_POD, ns) if owned_by(p, meta(rs)["uid"]) and
                             p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        if not spec.get("paused"):
            if recreate:  # every old pod gone before a new one starts
                for rs in olds:
                    self.scale_rs(d, rs, 0)
                if any(active(rs) for rs in olds):
                    new_target = None
                else:
                    new_target = replicas
            else:  # RollingUpdate, simplified: the new ReplicaSet at full size, the old ones to 0 once it is available
                new_target = replicas
                if new is not None and dig(new, "status", "availableReplicas", default=0) >= replicas:
                    for rs in olds:
                        self.scale_rs(d, rs, 0)
            if new is None and new_target is not None:
                new = self.create_rs(d, phash, max([rev(rs) for rs in olds] + [0]) + 1, new_target)
            elif new is not None and new_target is not None:
                if rev(new) <= max([rev(rs) for rs in olds] + [0]):  # rolled back to it: it is the newest again
                    r = max(rev(rs) for rs in olds) + 1
                    st.mutate(R_RS, ns, meta(new)["name"], lambda o: meta(o).setdefault("annotations", {}).update(
                        {"deployment.kubernetes.io/revision": str(r)}), uid=meta(new)["uid"])
                self.scale_rs(d, new, new_target)
            # revisionHistoryLimit: old ReplicaSets at 0 beyond it go, oldest first
            dead = sorted((rs for rs in olds if not dig(rs, "spec", "replicas") and not active(rs)), key=rev)
            for rs in dead[:max(0, len(dead) - spec.get("revisionHistoryLimit", 10))]:
                try:
                    st.delete(R_RS, ns, meta(rs)["name"], {"preconditions": {"uid": meta(rs)["uid"]}})
                except ApiError:
                    pass
        # status, from the ReplicaSets' (re-read: they may have changed above)
        rss = [rs for rs in st.all(R_RS, ns) if owned_by(rs, uid) and not is_terminating(rs)]
        new = next((rs for rs in rss if meta(rs).get("labels", {}).get("pod-template-hash") == phash), None)
        total = lambda k: sum(dig(rs, "status", k, default=0) or 0 for rs in rss)
        updated = dig(new, "status", "replicas", default=0) if new is not None else 0
        old_status = d.get("status") or {}
        status = {"observedGeneration": m.get("generation", 1), "replicas": total("replicas"),
                  "updatedReplicas": updated, "readyReplicas": total("readyReplicas"),
                  "availableReplicas": total("availableReplicas"),
                  "unavailableReplicas": max(0, replicas - total("availableReplicas"))}
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}  # omitempty
        max_unavail = 0 if recreate else percent_of(dig(spec, "strategy", "rollingUpdate", "maxUnavailable",
                                                        default="25%"), replicas, round_up=False)
        conds = {c.get("type"): c for c in old_status.get("conditions") or []}
        now = now_ts()

        def cond(type_, ok, reason, message):
            c = conds.get(type_)
            st_ = "True" if ok else "False"
            if c and c.get("status") == st_ and c.get("reason") == reason and c.get("message") == message:
                return c
            return {"type": type_, "status": st_, "lastUpdateTime": now, "reason": reason, "message": message,
                    "lastTransitionTime": c.get("lastTransitionTime", now) if c and c.get("status") == st_
                    else now}
        avail = total("availableReplicas") >= replicas - max_unavail
        out = [cond("Available", avail, "MinimumReplicasAvailable" if avail else "MinimumReplicasUnavailable",
                    "Deployment has %sminimum availability." % ("" if avail else "does not have "))]
        if new is not None:
            done = updated == replicas and total("replicas") == replicas and \
                dig(new, "status", "availableReplicas", default=0) >= replicas
            out.append(cond("Progressing", True, "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                            'ReplicaSet "%s" %s.' % (meta(new)["name"], "has successfully progressed" if done
                                                      else "is progressing")))
        elif "Progressing" in conds:
            out.append(conds["Progressing"])
        out.sort(key=lambda c: c["type"])
        status["conditions"] = out
        if status != old_status:
            st.mutate(R_DEPLOY, ns, name, lambda o: o.update(status=status), uid=uid)

    def deployment_stored(self, d):
        """--deployments store: no ReplicaSets, no pods; the status tracks observedGeneration only."""
        m = meta(d)
        status = dict(d.get("status") or {})
        status["observedGeneration"] = m.get("generation", 1)
        if status != (d.get("status") or {}):
            self.store.mutate(R_DEPLOY, m.get("namespace"), m["name"], lambda o: o.update(status=status),
                              uid=m["uid"])

    def create_rs(self, d, phash, revision, replicas):
        m, spec = meta(d), d.get("spec") or {}
        tmpl = copy.deepcopy(spec.get("template") or {})
        tm = tmpl.setdefault("metadata", {})
        tm.setdefault("labels", {})["pod-template-hash"] = phash
        sel = copy.deepcopy(spec.get("selector") or {})
        sel.setdefault("matchLabels", {})["pod-template-hash"] = phash
        rs_name = "%s-%s" % (m["name"], phash)
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": rs_name, "labels": dict(tm["labels"]),
                           "annotations": {"deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                                           "deployment.kubernetes.io/max-replicas": str(spec.get("replicas", 1)),
                                           "deployment.kubernetes.io/revision": str(revision)},
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": m["name"],
                                                "uid": m["uid"], "controller": True, "blockOwnerDeletion": True}]},
              "spec": {"replicas": replicas, "minReadySeconds": spec.get("minReadySeconds", 0), "selector": sel,
                       "template": tmpl}}
        try:
            out = self.store.create(R_RS, m["namespace"], rs, internal=True)
        except ApiError as e:
            log("deployment %s: cannot create replica set %s: %s" % (m["name"], rs_name, e))
            return None
        record_event(self.store, d, "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d" % (rs_name, replicas),
                     component="deployment-controller")
        return out

    def scale_rs(self, d, rs, n):
        rm = meta(rs)
        was = dig(rs, "spec", "replicas", default=1)
        if was == n:
            return
        self.store.mutate(R_RS, rm["namespace"], rm["name"], lambda o: o["spec"].update(replicas=n), uid=rm["uid"])
        record_event(self.store, d, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d" % (
            "up" if n > was else "down", rm["name"], was, n), component="deployment-controller")

    # -- ReplicaSet: pods RS-<5 random characters> up to spec.replicas

    def replicaset(self, rs):
        st, m, spec = self.store, meta(rs), rs.get("spec") or {}
        ns, name, uid = m.get("namespace"), m["name"], m["uid"]
        replicas = spec.get("replicas", 1)
        pods = [p for p in st.all(R_POD, ns) if owned_by(p, uid)]
        # active: not being deleted and not ended (an ended pod stays, as the real controller leaves it)
        active = [p for p in pods if not is_terminating(p) and
                  p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        for _ in range(replicas - len(active)):
            self.create_rs_pod(rs)
        if len(active) > replicas:  # the least useful first: not scheduled, pending, not ready, newest
            rank = lambda p: (p.get("status", {}).get("phase") == "Running", pod_ready(p),
                              -(parse_ts(meta(p).get("creationTimestamp")) or 0))
            for p in sorted(active, key=rank)[:len(active) - replicas]:
                try:
                    st.delete(R_POD, ns, meta(p)["name"], {"preconditions": {"uid": meta(p)["uid"]}})
                    record_event(st, rs, "SuccessfulDelete", "Deleted pod: %s" % meta(p)["name"],
                                 component="replicaset-controller")
                except ApiError:
                    pass
        active = [p for p in st.all(R_POD, ns) if owned_by(p, uid) and not is_terminating(p) and
                  p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        ready = sum(1 for p in active if pod_ready(p))
        status = {"replicas": len(active), "fullyLabeledReplicas": len(active), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": m.get("generation", 1)}
        status = {k: v for k, v in status.items() if v or k == "replicas"}  # omitempty
        if status != (rs.get("status") or {}):
            st.mutate(R_RS, ns, name, lambda o: o.update(status=status), uid=uid)

    def create_rs_pod(self, rs):
        m, spec = meta(rs), rs.get("spec") or {}
        tmpl = copy.deepcopy(spec.get("template") or {})
        tm = tmpl.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": m["name"] + "-", "labels": dict(tm.get("labels") or {}),
                            "annotations": dict(tm.get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": m["name"],
                                                 "uid": m["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": tmpl.get("spec") or {}}
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        try:
            out = self.store.create(R_POD, m["namespace"], pod, internal=True)
            record_event(self.store, rs, "SuccessfulCreate", "Created pod: %s" % meta(out)["name"],
                         component="replicaset-controller")
        except ApiError as e:
            record_event(self.store, rs, "FailedCreate", "Error creating: %s" % e.status["message"], "Warning",
                         component="replicaset-controller")

    # -- garbage collector: dependents of a gone owner are deleted (background cascade)

    def garbage_collect(self):
        st = self.store
        uids, everything = {}, []
        for r in RESOURCES:
            for o in st.all(r):
                uids[meta(o).get("uid")] = o
                everything.append((r, o))
        for r, o in everything:
            m = meta(o)
            refs = m.get("ownerReferences") or []
            if refs and not any(ref.get("uid") in uids and not ("foregroundDeletion" in (meta(uids[ref["uid"]]).get(
                    "finalizers") or [])) for ref in refs) and not is_terminating(o):
                try:
                    st.delete(r, m.get("namespace"), m["name"], {"preconditions": {"uid": m["uid"]}})
                except ApiError:
                    pass
            # foreground deletion: the owner goes once its dependents are gone
            if is_terminating(o) and "foregroundDeletion" in (m.get("finalizers") or []):
                if not any(owned_by(x, m["uid"]) for _, x in everything):
                    st.mutate(r, m.get("namespace"), m["name"], lambda x: meta(x).update(
                        finalizers=[f for f in meta(x).get("finalizers") or [] if f != "foregroundDeletion"]))
                    cur = st.peek(r, m.get("namespace"), m["name"])
                    if cur is not None and not meta(cur).get("finalizers"):
                        st.remove(r, m.get("namespace"), m["name"], uid=m["uid"])

    # -- namespaces: a terminating namespace is emptied, then removed

    def namespaces(self):
        st = self.store
        for nso in st.all(R_NS):
            if not is_terminating(nso):
                continue
            ns, left = meta(nso)["name"], 0
            for r in RESOURCES:
                if not r.namespaced:
                    continue
                for o in st.all(r, ns):
                    left += 1
                    if not is_terminating(o):
                        try:
                            st.delete(r, ns, meta(o)["name"], {})
                        except ApiError:
                            pass
                    elif r is not R_POD and not meta(o).get("finalizers"):
                        st.remove(r, ns, meta(o)["name"])
            if not left:
                st.remove(R_NS, "", ns, uid=meta(nso)["uid"])


# ==== kubelet =======================================================================================

PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork
except (OSError, AttributeError):
    _prctl = None


def _child_setup(plan=None):
    """In the container's process, before exec: die with the simulator (its kubelet thread), even on SIGKILL;
    with a MountPlan, enter a mount namespace of its own first."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if plan is not None:
        _enter_mount_ns(plan)


# Mount namespaces: a container whose volumeMounts lie under /run/secrets (/var/run/secrets: the service-account
# token, which clients open by that absolute path, never told where it is) gets a private mount namespace in
# which a fresh tmpfs covers /run, each entry of the host's /run is a symlink to it (bind-mounted under the
# pod's directory), and those volumes are bind-mounted at their mountPaths. Nothing changes outside the
# container. As root a plain mount namespace; else in a user namespace mapping only the simulator's uid.
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = \
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _unshare, _mount = _libc.unshare, _libc.mount  # resolved before any fork
    _unshare.argtypes = [ctypes.c_int]
    _mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
except (OSError, AttributeError):
    _unshare = _mount = None
RUN_DIR = os.path.realpath("/var/run")  # /run where /var/run links there
SECRETS_DIR = os.path.join(RUN_DIR, "secrets")
MOUNT_NS = False  # whether containers can get mount namespaces here (tried once at start, see Kubelet)
MountPlan = collections.namedtuple("MountPlan", "host_run entries binds uid gid")


def secret_target(mount_path):
    """The path a mountPath under /var/run/secrets or /run/secrets is bind-mounted at, else None."""
    t = mount_path.rstrip("/")
    for prefix in ("/var/run/", "/run/"):
        if t.startswith(prefix):
            t = os.path.join(RUN_DIR, t[len(prefix):])
            break
    return t if t.startswith(SECRETS_DIR + "/") else None


def mount_plan(host_run, binds):
    """binds: [(sandbox path, target, read-only)]; host_run: an empty directory outside /run."""
    os.makedirs(host_run, exist_ok=True)
    tops = {os.path.relpath(t, RUN_DIR).split("/")[0] for _, t, _ in binds}
    try:
        entries = [e for e in os.listdir(RUN_DIR) if e not in tops]
    except OSError:
        entries = []
    keep = []
    for src, target, ro in binds:
        flags = 0
        try:
            f = os.statvfs(src).f_flag  # the source's locked flags, kept on a read-only remount
            flags = (MS_NOSUID if f & os.ST_NOSUID else 0) | (MS_NODEV if f & os.ST_NODEV else 0) | \
                (MS_NOEXEC if f & os.ST_NOEXEC else 0)
        except OSError:
            pass
        keep.append((os.fsencode(src), target, ro, flags))
    return MountPlan(os.fsencode(host_run), [os.fsencode(e) for e in entries], keep, os.geteuid(), os.getegid())


def _mnt(src, target, fstype, flags, data=None):
    if _mount(src, os.fsencode(target) if isinstance(target, str) else target, fstype, flags, data) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s: %s" % (target, os.strerror(e)))


def _enter_mount_ns(plan):
    user_ns = plan.uid != 0
    if _unshare is None or _unshare(CLONE_NEWNS | (CLONE_NEWUSER if user_ns else 0)) != 0:
        raise OSError(ctypes.get_errno() if _unshare else 0, "unshare")
    if user_ns:
        for f, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (plan.uid, plan.uid)),
                        ("gid_map", "%d %d 1" % (plan.gid, plan.gid))):
            fd = os.open("/proc/self/" + f, os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
    run = os.fsencode(RUN_DIR)
    _mnt(None, b"/", None, MS_REC | MS_PRIVATE)
    _mnt(run, plan.host_run, None, MS_BIND | MS_REC)
    _mnt(b"tmpfs", run, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=755")
    for e in plan.entries:
        os.symlink(os.path.join(plan.host_run, e), os.path.join(run, e))
    for src, target, ro, flags in plan.binds:
        os.makedirs(target, exist_ok=True)
        _mnt(src, target, None, MS_BIND)
        if ro:
            try:
                _mnt(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
            except OSError:
                pass  # read-only is a nicety here


def mount_ns_works(tmp):
    """Try once: a process in a mount namespace sees a directory bind-mounted under /run/secrets."""
    src = os.path.join(tmp, ".mount-ns-probe")
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "probe"), "w") as f:
        f.write("ok")
    target = os.path.join(SECRETS_DIR, "apisim-probe")
    plan = mount_plan(os.path.join(tmp, ".mount-ns-probe-run"), [(src, target, True)])
    try:
        r = subprocess.run([sys.executable, "-c", "import sys; sys.exit(open(sys.argv[1]).read() != 'ok')",
                            os.path.join(target, "probe")], preexec_fn=lambda: _child_setup(plan),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        ok = r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(os.path.join(tmp, ".mount-ns-probe-run"), ignore_errors=True)
    return ok


WATCHDOG = r"""
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line.startswith("-"):
        groups.discard(int(line[1:]))
    elif line:
        groups.add(int(line))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


class ConfigError(Exception):
    """A pod that cannot start yet: a missing Secret, ConfigMap or key (it stays Pending and is retried)."""

    def __init__(self, reason, message):
        Exception.__init__(self, message)
        self.reason, self.message = reason, message


def sig_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "SIG%d" % n


class Container:
    """One container of a pod: its spec, its current process and what Kubernetes reports about it."""

    def __init__(self, spec, init):
        self.spec, self.init, self.name = spec, init, spec.get("name", "")
        self.proc = None
        self.pgid = None
        self.state = "waiting"
        self.waiting_reason, self.waiting_message = "ContainerCreating", ""
        self.started_at = self.finished_at = None
        self.exit_code, self.exit_signal, self.term_reason, self.term_message = None, None, None, None
        self.last_term = None
        self.restart_count = 0
        self.backoff = None
        self.next_start = 0.0
        self.gen = 0  # bumped at every start; probers of an older instance stop
        self.liveness_kill_gen = 0  # the instance a failed liveness probe already had SIGTERMed
        self.liveness_kill_at = float("inf")  # ... and when it gets SIGKILL
        self.probe_ready = False
        self.liveness_failed = False
        self.log_starts = []  # byte offsets of each instance in the log: `kubectl logs` shows the last
        self.run = None  # (argv, env, cwd) once resolved
        self.mounts = []  # (mountPath, sandbox path), longest first
        self.mount_plan = None  # a MountPlan when it needs a mount namespace

    def ready(self):
        return self.state == "running" and (self.probe_ready or not self.spec.get("readinessProbe")) and not \
            self.init

    def terminated_dict(self):
        d = {"exitCode": self.exit_code, "reason": self.term_reason, "startedAt": self.started_at,
             "finishedAt": self.finished_at, "containerID": "apisim://%s" % (self.proc.pid if self.proc else 0)}
        if self.exit_signal:
            d["signal"] = self.exit_signal
        if self.term_message:
            d["message"] = self.term_message
        return d

    def status(self, pod_name, ns, uid):
        s = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "",
             "ready": self.ready(), "restartCount": self.restart_count, "started": self.state == "running"}
        if self.proc is not None:
            s["containerID"] = "apisim://%d" % self.proc.pid
        if self.state == "running":
            s["state"] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            s["state"] = {"terminated": self.terminated_dict()}
        else:
            w = {"reason": self.waiting_reason}
            if self.waiting_message:
                w["message"] = self.waiting_message
            s["state"] = {"waiting": w}
        s["lastState"] = {"terminated": self.last_term} if self.last_term else {}
        if self.init:
            del s["started"]
        return s


class PodRuntime:
    """What the kubelet knows of one pod it runs (keyed by uid)."""

    def __init__(self, pod, ip, pdir):
        m = meta(pod)
        self.ns, self.name, self.uid = m.get("namespace"), m["name"], m["uid"]
        self.ip, self.dir = ip, pdir
        spec = pod.get("spec") or {}
        self.policy = spec.get("restartPolicy", "Always")
        self.inits = [Container(c, True) for c in spec.get("initContainers") or []]
        self.mains = [Container(c, False) for c in spec.get("containers") or []]
        self.prepared = False
        self.config_error = None
        self.next_prepare = 0.0
        self.start_time = now_ts()
        self.terminating, self.kill_at, self.killed = False, None, False
        self.remove_at = 0.0  # a deleted pod is removed no sooner than this
        self.transitions = {}  # condition type -> (status, lastTransitionTime)
        self.next_volume_sync = 0.0
        # emptyDir volumes: <pod dir>/volumes/<name>/, kept across container restarts, removed with the pod
        self.empty_dirs = [v.get("name", "") for v in spec.get("volumes") or [] if "emptyDir" in v]
        self.record = {"namespace": self.ns, "name": self.name, "uid": self.uid, "ip": ip, "pid": None, "pids": [],
                       "exit_codes": [], "signals": [], "containers": {}, "created": now_ts(), "started": None,
                       "removed": None, "dir": pdir}
        for c in self.inits + self.mains:
            self.record["containers"][c.name] = {"pids": [], "exit_codes": [], "signals": [], "restarts": 0}

    def all(self):
        return self.inits + self.mains

    def running(self):
        return [c for c in self.all() if c.state == "running"]

    def note_signal(self, c, sig):
        name = sig_name(sig)
        self.record["containers"][c.name]["signals"].append(name)
        if not self.record["signals"] or self.record["signals"][-1] != name:
            self.record["signals"].append(name)


class Kubelet(threading.Thread):
    """Runs every pod's containers as processes in their own process groups, reports status, restarts them
    as restartPolicy says, probes readiness and liveness, and carries out graceful deletions.

    All processes are spawned from this one long-lived thread: PR_SET_PDEATHSIG fires when the thread that
    forked a child exits, so spawning from short-lived threads would kill containers early."""

    def __init__(self, store, stop, root, bin_dirs, node):
        threading.Thread.__init__(self, name="kubelet", daemon=True)
        self.store, self.stop, self.root, self.bin_dirs, self.node = store, stop, root, bin_dirs, node
        self.kick = threading.Event()
        store.kicks.append(self.kick)
        self.pods = {}  # uid -> PodRuntime
        self.records = []  # every PodRuntime.record ever, for /_sim/pods
        self.lock = threading.Lock()  # guards records and the containers' probe flags
        self.ips = set()
        self.watchdog = None
        self.dead = False
        try:
            self.watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG], stdin=subprocess.PIPE,
                                             start_new_session=True)
        except OSError as e:
            log("no watchdog (%s): processes may outlive a SIGKILLed simulator" % e)

    def tell_watchdog(self, line):
        if self.watchdog is not None:
            try:
                self.watchdog.stdin.write(("%s\n" % line).encode())
                self.watchdog.stdin.flush()
            except (OSError, ValueError):
                pass

    def run(self):
        while not self.stop.is_set():
            self.kick.wait(0.1)
            self.kick.clear()
            try:
                self.sync_all()
            except Exception:  # log and carry on: one bad pod must not stop every other
                traceback.print_exc()
        self.shutdown()  # here, before this thread ends and PR_SET_PDEATHSIG SIGKILLs every container

    def sync_all(self):
        with self.store.lock:
            pods = {meta(p)["uid"]: p for p in self.store.all(R_POD)}
        # pods removed from the store without us (force delete, grace 0): kill at once
        for uid, rt in list(self.pods.items()):
            if uid not in pods:
                rt.terminating = True
                self.kill_now(rt)
                self.finish(rt, remove=False)
        for uid, pod in pods.items():
            rt = self.pods.get(uid)
            if rt is None:
                if self.dead:
                    continue
                rt = self.admit(pod)
            self.sync(rt, pod)

    # -- admission: an IP, a directory, volumes

    def alloc_ip(self):
        base = [int(x) for x in OPT.pod_ip_start.split(".")]
        n = (base[1] << 16) | (base[2] << 8) | base[3]
        services = {dig(o, "spec", "clusterIP") for o in self.store.all(R_SVC)}
        while True:
            ip = "127.%d.%d.%d" % ((n >> 16) & 255, (n >> 8) & 255, n & 255)
            if (n & 255) not in (0, 255) and ip not in self.ips and ip not in services:
                self.ips.add(ip)
                return ip
            n += 1
            if n >= 1 << 24:
                raise RuntimeError("no free loopback address")

    def admit(self, pod):
        m = meta(pod)
        pdir = os.path.join(self.root, m.get("namespace", ""), m["name"])
        os.makedirs(pdir, exist_ok=True)
        self.archive(pdir)
        with open(os.path.join(pdir, ".uid"), "w") as f:
            f.write(m["uid"])
        rt = PodRuntime(pod, self.alloc_ip(), pdir)
        self.pods[rt.uid] = rt
        with self.lock:
            self.records.append(rt.record)
        return rt

    def archive(self, pdir):
        """A new pod with an old pod's name: the old one's logs and volumes move to previous/<uid>/."""
        try:
            with open(os.path.join(pdir, ".uid")) as f:
                old = f.read().strip()
        except OSError:
            return
        dest = os.path.join(pdir, "previous", old)
        os.makedirs(dest, exist_ok=True)
        for entry in os.listdir(pdir):
            if entry != "previous":
                shutil.move(os.path.join(pdir, entry), os.path.join(dest, entry))
        with self.lock:
            for r in self.records:
                if r["uid"] == old:
                    r["dir"] = dest

    def lookup(self, res, ns, name):
        return self.store.peek(res, ns, name)

    def key_value(self, res, ns, name, key, optional, what):
        o = self.lookup(res, ns, name)
        if o is None:
            if optional:
                return None
            raise ConfigError("CreateContainerConfigError", '%s "%s" not found' % (what.lower(), name))
        if res is R_SECRET:
            v = (o.get("data") or {}).get(key)
            if v is not None:
                return base64.b64decode(v).decode(errors="replace")
        else:
            v = (o.get("data") or {}).get(key)
            if v is None and key in (o.get("binaryData") or {}):
                v = base64.b64decode(o["binaryData"][key]).decode(errors="replace")
            if v is not None:
                return v
        if optional:
            return None
        raise ConfigError("CreateContainerConfigError", "couldn't find key %s in %s %s/%s" % (key, what, ns, name))

    def field_ref(self, pod, rt, path):
        m = meta(pod)
        mm = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path)
        if mm:
            return (m.get(mm.group(1)) or {}).get(mm.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            d = m.get(path.split(".")[1]) or {}
            return "\n".join('%s="%s"' % kv for kv in sorted(d.items()))
        vals = {"metadata.name": m["name"], "metadata.namespace": m.get("namespace", ""), "metadata.uid": m["uid"],
                "status.podIP": rt.ip, "status.podIPs": rt.ip, "status.hostIP": "127.0.0.1",
                "status.hostIPs": "127.0.0.1", "spec.nodeName": self.node,
                "spec.serviceAccountName": dig(pod, "spec", "serviceAccountName", default="default")}
        if path not in vals:
            raise ConfigError("CreateContainerConfigError", "unsupported fieldPath: %s" % path)
        return vals[path]

    def resource_ref(self, pod, ref):
        c = next((c for c in dig(pod, "spec", "containers", default=[]) if c.get("name") == ref.get(
            "containerName")), (dig(pod, "spec", "containers", default=[{}]) or [{}])[0])
        kind, what = ref.get("resource", "limits.cpu").split(".", 1)
        v = dig(c, "resources", kind, what)
        if v is None:
            v = str(os.cpu_count() or 1) if what == "cpu" else str(
                os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) if what == "memory" else "0"
        return str(v)

    def write_files(self, d, files, mode=None):
        """Write {relative path: bytes} into d, changing only what differs (a running pod sees updates)."""
        for rel, data in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            try:
                with open(p, "rb") as f:
                    if f.read() == data:
                        continue
            except OSError:
                pass
            tmp = p + ".apisim-tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, p)

    def source_files(self, pod, rt, src, kind, ns):
        """The files of a configMap, secret or downwardAPI volume source."""
        files = {}
        if kind in ("configMap", "secret"):
            res = R_CM if kind == "configMap" else R_SECRET
            name = src.get("name") if kind == "configMap" else src.get("secretName", src.get("name"))
            o = self.lookup(res, ns, name)
            if o is None:
                if src.get("optional"):
                    return files
                raise ConfigError("ContainerCreating", 'MountVolume.SetUp failed: %s "%s" not found'
                                  % (kind.lower(), name))
            data = {}
            for k, v in (o.get("data") or {}).items():
                data[k] = base64.b64decode(v) if res is R_SECRET else v.encode()
            for k, v in (o.get("binaryData") or {}).items():
                data[k] = base64.b64decode(v)
            items = src.get("items")
            if items:
                for it in items:
                    if it.get("key") not in data:
                        if src.get("optional"):
                            continue
                        raise ConfigError("ContainerCreating", "MountVolume.SetUp failed: configmap references "
                                          "non-existent config key: %s" % it.get("key"))
                    files[it.get("path", it["key"])] = data[it["key"]]
            else:
                files.update(data)
        elif kind == "downwardAPI":
            for it in src.get("items") or []:
                if it.get("fieldRef"):
                    v = self.field_ref(pod, rt, it["fieldRef"].get("fieldPath", ""))
                else:
                    v = self.resource_ref(pod, it.get("resourceFieldRef") or {})
                files[it["path"]] = v.encode()
        return files

    def volumes(self, pod, rt):
        """Materialize the pod's volumes under <pod dir>/volumes/<name>/; returns {name: host path}."""
        ns = rt.ns
        out = {}
        for v in dig(pod, "spec", "volumes", default=[]) or []:
            name = v.get("name", "")
            d = os.path.join(rt.dir, "volumes", name)
            if "hostPath" in v:
                out[name] = v["hostPath"].get("path", "/")
                continue
            if "persistentVolumeClaim" in v:  # lives on across pods: <root>/<ns>/pvc/<claim>/
                d = os.path.join(self.root, ns, "pvc", v["persistentVolumeClaim"].get("claimName", name))
                os.makedirs(d, exist_ok=True)
                out[name] = d
                continue
            os.makedirs(d, exist_ok=True)
            out[name] = d
            mode = None
            files = None
            for kind in ("configMap", "secret", "downwardAPI"):
                if kind in v:
                    files = self.source_files(pod, rt, v[kind] or {}, kind, ns)
                    mode = (v[kind] or {}).get("defaultMode")
            if "projected" in v:
                files = {}
                for src in (v["projected"] or {}).get("sources") or []:
                    for kind in ("configMap", "secret", "downwardAPI"):
                        if kind in src:
                            files.update(self.source_files(pod, rt, src[kind] or {}, kind, ns))
                    if "serviceAccountToken" in src:  # a token bound to this pod (never expires here)
                        sa = dig(pod, "spec", "serviceAccountName", default="default")
                        files[src["serviceAccountToken"].get("path", "token")] = pod_token(ns, sa, rt.uid).encode()
                mode = (v["projected"] or {}).get("defaultMode")
            if files is not None:
                self.write_files(d, files, mode)
            # emptyDir (medium and sizeLimit ignored; removed with the pod, see finish) and anything else: a
            # plain directory
        return out

    def expand(self, s, env):
        """$(VAR) from the variables defined so far; $$(VAR) is a literal $(VAR)."""
        def sub(m):
            if m.group(0).startswith("$$"):
                return m.group(0)[1:]
            return env.get(m.group(1), m.group(0))
        return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, s)

    def container_env(self, pod, rt, c):
        spec = c.spec
        env = collections.OrderedDict()
        for ef in spec.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            for kind, res in (("configMapRef", R_CM), ("secretRef", R_SECRET)):
                ref = ef.get(kind)
                if not ref:
                    continue
                o = self.lookup(res, rt.ns, ref.get("name"))
                if o is None:
                    if ref.get("optional"):
                        continue
                    raise ConfigError("CreateContainerConfigError", '%s "%s" not found'
                                      % ("configmap" if res is R_CM else "secret", ref.get("name")))
                for k, v in sorted((o.get("data") or {}).items()):
                    if re.match(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", prefix + k):
                        env[prefix + k] = base64.b64decode(v).decode(errors="replace") if res is R_SECRET else v
        for e in spec.get("env") or []:
            name, vf = e.get("name"), e.get("valueFrom")
            if vf is None:
                env[name] = self.expand(str(e.get("value", "")), env)
            elif vf.get("fieldRef"):
                env[name] = self.field_ref(pod, rt, vf["fieldRef"].get("fieldPath", ""))
            elif vf.get("resourceFieldRef"):
                env[name] = self.resource_ref(pod, vf["resourceFieldRef"])
            elif vf.get("secretKeyRef") or vf.get("configMapKeyRef"):
                ref = vf.get("secretKeyRef") or vf.get("configMapKeyRef")
                res, what = (R_SECRET, "Secret") if vf.get("secretKeyRef") else (R_CM, "ConfigMap")
                v = self.key_value(res, rt.ns, ref.get("name"), ref.get("key"), ref.get("optional"), what)
                if v is not None:
                    env[name] = v
        return env

    def rewrite(self, s, mounts):
        """A path under a mountPath (longest first) becomes the same path under the volume's sandbox directory;
        `--flag=/mount/path` too."""
        if not isinstance(s, str):
            return s
        for mp, hp in mounts:
            mpn = mp.rstrip("/")
            if s == mpn or s.startswith(mpn + "/"):
                return hp + s[len(mpn):]
        if s.startswith("-") and "=" in s:
            flag, val = s.split("=", 1)
            nv = self.rewrite(val, mounts)
            if nv != val:
                return flag + "=" + nv
        return s

    def prepare(self, pod, rt):
        """Volumes, then each container's argv, env and working directory (ConfigError if something's missing)."""
        vols = self.volumes(pod, rt)
        for c in rt.all():
            mounts = []
            for vm in c.spec.get("volumeMounts") or []:
                mp, vname = vm.get("mountPath", ""), vm.get("name")
                if vname not in vols or mp.rstrip("/") == "":
                    continue
                hp = vols[vname]
                if vm.get("subPath"):
                    hp = os.path.join(hp, vm["subPath"])
                    if not os.path.exists(hp):
                        os.makedirs(hp, exist_ok=True)
                mounts.append((mp, hp))
            mounts.sort(key=lambda x: -len(x[0].rstrip("/")))
            env = self.container_env(pod, rt, c)
            env = collections.OrderedDict((k, self.rewrite(v, mounts)) for k, v in env.items())
            base = collections.OrderedDict()
            base["PATH"] = os.pathsep.join(self.bin_dirs + [os.environ.get("PATH", "/usr/bin:/bin")])
            base["HOME"] = rt.dir
            base["HOSTNAME"] = dig(pod, "spec", "hostname") or rt.name
            # the API server, as the kubelet gives every container (the "kubernetes" Service's variables)
            base["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
            base["KUBERNETES_SERVICE_PORT"] = base["KUBERNETES_SERVICE_PORT_HTTPS"] = str(API_PORT)
            base["KUBERNETES_PORT"] = "tcp://127.0.0.1:%s" % API_PORT
            base.update(env)
            argv = [self.rewrite(self.expand(str(a), base), mounts) for a in
                    (c.spec.get("command") or []) + (c.spec.get("args") or [])]
            binds = [(hp, secret_target(mp), any(vm.get("mountPath") == mp and vm.get("readOnly")
                                                 for vm in c.spec.get("volumeMounts") or []))
                     for mp, hp in mounts if secret_target(mp)]
            c.mount_plan = None
            if binds and MOUNT_NS:
                c.mount_plan = mount_plan(os.path.join(rt.dir, ".host-run"), binds)
            if not c.spec.get("command"):
                # no command: the image name's last path element stands for its entrypoint
                img = (c.spec.get("image") or "").rsplit("/", 1)[-1].split(":")[0].split("@")[0]
                argv = [img] + argv
            cwd = self.rewrite(c.spec.get("workingDir") or rt.dir, mounts)
            c.run = (argv, dict(base), cwd)
            c.mounts = mounts
        rt.prepared = True

    # -- processes

    def resolve(self, cmd, env):
        if "/" in cmd:
            return cmd if os.access(cmd, os.X_OK) and os.path.isfile(cmd) else None
        for d in self.bin_dirs + env.get("PATH", "").split(os.pathsep):
            p = os.path.join(d, cmd)
            if d and os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None

    def spawn(self, rt, c):
        argv, env, cwd = c.run
        log_path = os.path.join(rt.dir, "%s.log" % c.name)
        if c.gen:  # not its first instance: a restart
            c.restart_count += 1
            rt.record["containers"][c.name]["restarts"] = c.restart_count
        c.gen += 1
        c.probe_ready, c.liveness_failed = False, False
        c.started_at = now_ts()
        c.exit_code = c.exit_signal = c.term_reason = c.term_message = None
        exe = self.resolve(argv[0], env) if argv and argv[0] else None
        with open(log_path, "ab") as lf:
            c.log_starts.append(lf.tell())
            if exe is None:
                c.proc = None
                return self.start_failed(rt, c, 'exec: "%s": executable file not found in $PATH'
                                         % (argv[0] if argv else ""))
            try:
                os.makedirs(cwd, exist_ok=True)
                c.proc = subprocess.Popen([exe] + argv[1:], executable=exe, env=env, cwd=cwd,
                                          stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                          start_new_session=True,
                                          preexec_fn=lambda plan=c.mount_plan: _child_setup(plan))
            except OSError as e:
                c.proc = None
                return self.start_failed(rt, c, "failed to start %s: %s" % (argv[0], e))
        c.pgid = c.proc.pid
        self.tell_watchdog(c.pgid)
        c.state = "running"
        rec = rt.record
        rec["pids"].append(c.proc.pid)
        rec["containers"][c.name]["pids"].append(c.proc.pid)
        if not c.init:
            rec["pid"] = rt.mains[0].proc.pid if rt.mains[0].proc else c.proc.pid
        rec["started"] = rec["started"] or now_ts()
        for kind in ("readinessProbe", "livenessProbe"):
            if isinstance(c.spec.get(kind), dict) and not c.init:
                threading.Thread(target=self.prober, args=(rt, c, c.gen, kind, c.spec[kind]),
                                 daemon=True, name="probe-%s-%s" % (rt.name, c.name)).start()

    def start_failed(self, rt, c, message):
        """Like a runtime that cannot exec the entrypoint: terminated with 128, reason StartError."""
        c.state = "terminated"
        c.exit_code, c.term_reason, c.term_message = 128, "StartError", message
        c.finished_at = now_ts()
        rt.record["exit_codes"].append(128)
        rt.record["containers"][c.name]["exit_codes"].append(128)
        self.after_exit(rt, c)

    def reap(self, rt, c):
        """A container's process ended: record it and decide on a restart."""
        code = c.proc.returncode
        if OPT.kill_after_exit:
            self.killpg(c, signal.SIGKILL)  # what is left of the container goes with it, like its cgroup
        if code < 0:
            c.exit_signal, c.exit_code = -code, 128 - code
        else:
            c.exit_code = code
        c.term_reason = "Completed" if c.exit_code == 0 else "Error"
        if c.liveness_failed:
            c.term_message = "Container %s failed liveness probe, will be restarted" % c.name
        c.state = "terminated"
        c.finished_at = now_ts()
        rt.record["exit_codes"].append(c.exit_code)
        rt.record["containers"][c.name]["exit_codes"].append(c.exit_code)
        self.after_exit(rt, c)

    def after_exit(self, rt, c):
        policy = rt.policy
        deleting = rt.terminating or is_terminating(self.store.peek(R_POD, rt.ns, rt.name) or {})
        restart = not deleting and (policy == "Always" or (policy == "OnFailure" and c.exit_code != 0))
        if c.init and c.exit_code == 0:
            restart = False
        if not restart:
            return
        ran = (parse_ts(c.finished_at) or 0) - (parse_ts(c.started_at) or 0)
        if c.backoff is None or ran >= 10 * 60:
            c.backoff = OPT.restart_backoff
        c.last_term = c.terminated_dict()
        c.state = "waiting"
        c.waiting_reason = "CrashLoopBackOff"
        c.waiting_message = "back-off %gs restarting failed container=%s pod=%s_%s(%s)" % (
            c.backoff, c.name, rt.name, rt.ns, rt.uid)
        c.next_start = time.monotonic() + c.backoff
        c.backoff = min(c.backoff * 2, max(10.0, OPT.restart_backoff))

    def killpg(self, c, sig, rt=None):
        if c.pgid is None:
            return
        try:
            os.killpg(c.pgid, sig)
        except OSError:
            return
        if rt is not None:
            rt.note_signal(c, sig)

    def kill_now(self, rt):
        """SIGKILL every process of the pod and wait (briefly) for them."""
        for c in rt.all():
            if c.state == "running":
                self.killpg(c, signal.SIGKILL, rt)
        deadline = time.monotonic() + 2
        for c in rt.all():
            if c.state == "running" and c.proc is not None:
                try:
                    c.proc.wait(max(0.01, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                if c.proc.poll() is not None:
                    self.reap(rt, c)

    def finish(self, rt, remove=True):
        """The pod is done on this node: kill leftovers, free its IP, drop it from the store."""
        for c in rt.all():
            if c.pgid is not None:
                try:
                    os.killpg(c.pgid, signal.SIGKILL)  # whatever the container left behind
                except OSError:
                    pass
                self.tell_watchdog("-%d" % c.pgid)
        self.pods.pop(rt.uid, None)
        self.ips.discard(rt.ip)
        for name in rt.empty_dirs:  # as a kubelet tears down a removed pod's emptyDirs (logs stay, for the tests)
            if name and "/" not in name and name not in (".", ".."):
                shutil.rmtree(os.path.join(rt.dir, "volumes", name), ignore_errors=True)
        rt.record["removed"] = now_ts()
        if remove:
            self.store.remove(R_POD, rt.ns, rt.name, uid=rt.uid)

    # -- one pod

    def sync(self, rt, pod):
        now = time.monotonic()
        for c in rt.all():
            if c.state == "running" and c.proc is not None and c.proc.poll() is not None:
                self.reap(rt, c)
        if is_terminating(pod) and not rt.terminating:
            rt.terminating = True
            # the pod object stays a moment even if its containers end at once, as with a real kubelet:
            # `kubectl delete` GETs the pod, then lists and watches it; a pod gone and made again by its
            # controller in between would leave kubectl waiting for a deletion it missed
            rt.remove_at = now + OPT.removal_delay
            grace = meta(pod).get("deletionGracePeriodSeconds", 30) or 0
            rt.kill_at = now + grace
            for c in rt.running():
                self.killpg(c, signal.SIGTERM, rt)
        if rt.terminating:  # nothing restarts; the pod goes once no container runs
            if rt.running() and now >= rt.kill_at and not rt.killed:
                rt.killed = True
                for c in rt.running():
                    self.killpg(c, signal.SIGKILL, rt)
            if not rt.running():
                self.write_status(rt, pod, final=True)
                if now >= rt.remove_at:
                    self.finish(rt)
            return
        if not rt.prepared:
            if now < rt.next_prepare:
                return
            try:
                self.prepare(pod, rt)
                rt.config_error = None
            except ConfigError as e:
                rt.config_error = e
                rt.next_prepare = now + 1.0
                for c in rt.all():
                    c.waiting_reason, c.waiting_message = e.reason, e.message
                self.write_status(rt, pod)
                return
        elif now >= rt.next_volume_sync:
            rt.next_volume_sync = now + 2.0
            try:
                self.volumes(pod, rt)  # configMap and secret updates reach running pods
            except ConfigError:
                pass
        if now < self.store.starts_held_until:  # /_sim/hold-starts: as if its image were still pulling
            self.write_status(rt, pod)
            return
        # init containers one at a time, then every container
        for c in rt.inits:
            if c.state == "terminated" and c.exit_code == 0:
                continue
            if c.state == "waiting" and now >= c.next_start:
                self.spawn(rt, c)
            break
        else:
            for c in rt.mains:
                if c.state == "waiting" and now >= c.next_start:
                    self.spawn(rt, c)  # the first start, or a restart after its back-off
                elif c.state == "running" and c.liveness_failed and c.liveness_kill_gen != c.gen:
                    c.liveness_kill_gen = c.gen  # killed like a deletion would; restartPolicy decides the rest
                    c.liveness_kill_at = now + float(dig(pod, "spec", "terminationGracePeriodSeconds", default=30))
                    self.killpg(c, signal.SIGTERM, rt)
                elif c.state == "running" and c.liveness_kill_gen == c.gen and now >= c.liveness_kill_at:
                    c.liveness_kill_at = float("inf")
                    self.killpg(c, signal.SIGKILL, rt)
        self.write_status(rt, pod)

    def phase(self, rt):
        if rt.config_error or not rt.prepared:
            return "Pending"
        for c in rt.inits:
            if c.state == "terminated" and c.exit_code == 0:
                continue
            return "Failed" if c.state == "terminated" else "Pending"  # terminated here: nothing will restart it
        if any(c.state == "running" or (c.state == "waiting" and c.gen) for c in rt.mains):
            return "Running"
        if any(c.state == "waiting" for c in rt.mains):
            return "Pending"
        return "Succeeded" if all(c.exit_code == 0 for c in rt.mains) else "Failed"

    def condition(self, rt, type_, ok, reason=None, message=None):
        st = "True" if ok else "False"
        prev = rt.transitions.get(type_)
        if prev is None or prev[0] != st:
            rt.transitions[type_] = (st, now_ts())
        c = {"type": type_, "status": st, "lastProbeTime": None, "lastTransitionTime": rt.transitions[type_][1]}
        if not ok and reason:
            c["reason"], c["message"] = reason, message
        return c

    def write_status(self, rt, pod, final=False):
        phase = self.phase(rt)
        if final:
            phase = "Succeeded" if all(c.exit_code in (0, None) for c in rt.mains) and phase != "Failed" else \
                "Failed" if phase != "Pending" else "Pending"
        inits_done = all(c.state == "terminated" and c.exit_code == 0 for c in rt.inits)
        unready = [c.name for c in rt.mains if not c.ready()]
        ready = not unready and not final and phase == "Running"
        msg = "containers with unready status: [%s]" % " ".join(unready)
        status = {
            "phase": phase,
            "conditions": [
                self.condition(rt, "PodReadyToStartContainers", rt.prepared),
                self.condition(rt, "Initialized", inits_done, "ContainersNotInitialized",
                               "containers with incomplete status: [%s]" % " ".join(
                                   c.name for c in rt.inits if not (c.state == "terminated" and c.exit_code == 0))),
                self.condition(rt, "Ready", ready, "ContainersNotReady", msg),
                self.condition(rt, "ContainersReady", ready, "ContainersNotReady", msg),
                self.condition(rt, "PodScheduled", True)],
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": rt.ip, "podIPs": [{"ip": rt.ip}],
            "startTime": rt.start_time,
            "containerStatuses": [c.status(rt.name, rt.ns, rt.uid) for c in rt.mains],
            "qosClass": "BestEffort",
        }
        if rt.inits:
            status["initContainerStatuses"] = [c.status(rt.name, rt.ns, rt.uid) for c in rt.inits]
        if final:
            for cs in status["containerStatuses"] + status.get("initContainerStatuses", []):
                cs["ready"] = False
                cs["started"] = False

        def apply(o):
            o["status"] = status
            o.setdefault("spec", {})["nodeName"] = self.node
        self.store.mutate(R_POD, rt.ns, rt.name, apply, uid=rt.uid)

    # -- probes (one thread per probed container instance)

    def probe_once(self, rt, c, probe):
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            if "exec" in probe:
                argv, env, cwd = c.run
                cmd = [self.rewrite(self.expand(str(a), env), c.mounts) for a in probe["exec"].get("command") or []]
                exe = self.resolve(cmd[0], env) if cmd else None
                if exe is None:
                    return False
                p = subprocess.Popen([exe] + cmd[1:], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                try:
                    return p.wait(timeout) == 0
                except subprocess.TimeoutExpired:  # a failure; the probe's whole process group goes
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    p.wait()
                    return False
            if "tcpSocket" in probe or "httpGet" in probe:
                p = probe.get("tcpSocket") or probe.get("httpGet")
                port = p.get("port")
                if isinstance(port, str) and not port.isdigit():
                    port = next((cp.get("containerPort") for cp in c.spec.get("ports") or []
                                 if cp.get("name") == port), None)
                host = p.get("host") or rt.ip
                if "tcpSocket" in probe:
                    socket.create_connection((host, int(port)), timeout=timeout).close()
                    return True
                conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
                try:
                    conn.request("GET", p.get("path", "/"), headers={"User-Agent": "kube-probe/1.33"})
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
            if "grpc" in probe:
                return False
        except (OSError, subprocess.SubprocessError, ValueError, TypeError, http.client.HTTPException):
            return False
        return True

    def prober(self, rt, c, gen, kind, probe):
        if self.stop.wait(float(probe.get("initialDelaySeconds", 0))):
            return
        ok_run = bad_run = 0
        while not self.stop.is_set() and c.gen == gen and c.state == "running":
            ok = self.probe_once(rt, c, probe)
            if c.gen != gen:
                return
            ok_run, bad_run = (ok_run + 1, 0) if ok else (0, bad_run + 1)
            with self.lock:
                if kind == "readinessProbe":
                    if ok and ok_run >= probe.get("successThreshold", 1):
                        c.probe_ready = True
                    elif not ok and (bad_run >= probe.get("failureThreshold", 3) or not c.probe_ready):
                        c.probe_ready = False
                elif not ok and bad_run >= probe.get("failureThreshold", 3):
                    c.liveness_failed = True
            self.kick.set()
            if self.stop.wait(float(probe.get("periodSeconds", 10))):
                return

    # -- the end

    def shutdown(self):
        """The simulator is going: SIGTERM every container, then SIGKILL what is left after a second."""
        self.dead = True
        groups = [c for rt in list(self.pods.values()) for c in rt.all() if c.state == "running"]
        for c in groups:
            try:
                os.killpg(c.pgid, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.monotonic() + 1.0
        for c in groups:
            try:
                c.proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for rt in list(self.pods.values()):
            for c in rt.all():
                if c.pgid is not None:
                    try:
                        os.killpg(c.pgid, signal.SIGKILL)
                    except OSError:
                        pass
        for c in groups:  # reap them: no zombies left for an init that may not reap
            try:
                c.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
        if self.watchdog is not None:
            try:
                self.watchdog.stdin.close()
            except OSError:
                pass

    def sim_records(self):
        with self.lock:
            return copy.deepcopy(self.records)

    def log_path(self, ns, name, container):
        return os.path.join(self.root, ns, name, "%s.log" % container)

    def runtime(self, uid):
        return self.pods.get(uid)


# ==== kube-proxy ====================================================================================

def _reset(conn):
    """Close a connection with a RST, as a refused one (kube-proxy REJECTs a Service without endpoints)."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()


class KubeProxy(threading.Thread):
    """Services' cluster IPs: a listener on CLUSTERIP:PORT for each TCP port of each Service that has a
    (loopback) cluster IP, unless it is the pods' port too (see same_port); each connection goes to an endpoint picked at random when it arrives: a pod of the
    Service's namespace matching its selector, Running, not terminating, Ready (any Running one with
    publishNotReadyAddresses), at targetPort (a number, or a container port's name in that pod). No endpoint,
    or none that answers: the connection is reset. TCP is relayed byte for byte (half-closes passed on);
    the endpoint sees the connection come from 127.0.0.1."""

    def __init__(self, store, stop):
        threading.Thread.__init__(self, name="kube-proxy", daemon=True)
        self.store, self.stop = store, stop
        self.kick = threading.Event()
        store.kicks.append(self.kick)
        self.listeners = {}  # (ns, name, clusterIP, port) -> listening socket
        self.failed = {}  # key -> when to try binding again

    def run(self):
        while not self.stop.is_set():
            self.kick.wait(0.5)
            self.kick.clear()
            try:
                self.sync()
            except Exception:
                traceback.print_exc()
        for key in list(self.listeners):
            self.close(key)

    def sync(self):
        want = set()
        for svc in self.store.all(R_SVC):
            m, spec = meta(svc), svc.get("spec") or {}
            ip = spec.get("clusterIP")
            q = _ip4(ip)
            if q is None or q[0] != 127 or spec.get("type") == "ExternalName" or is_terminating(svc):
                continue
            for p in spec.get("ports") or []:
                if p.get("protocol", "TCP") == "TCP" and isinstance(p.get("port"), int) and \
                        not self.same_port(svc, p):
                    want.add((m.get("namespace"), m["name"], ip, p["port"]))
        for key in list(self.listeners):
            if key not in want:
                self.close(key)
        now = time.monotonic()
        for key in want - set(self.listeners):
            if self.failed.get(key, 0) > now:
                continue
            try:
                ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                ls.bind((key[2], key[3]))
                ls.listen(128)
            except OSError as e:
                ls.close()
                if key not in self.failed:
                    log("kube-proxy: service %s/%s: cannot listen on %s:%d: %s (retrying)" % (key + (e,)))
                self.failed[key] = now + 1.0
                continue
            self.failed.pop(key, None)
            self.listeners[key] = ls
            threading.Thread(target=self.accept_loop, args=(key, ls), daemon=True,
                             name="proxy-%s-%d" % (key[1], key[3])).start()

    def same_port(self, svc, sp):
        """Whether the Service's port is its pods' port too: then no listener. The pods share the host's network,
        and a pod listening on the wildcard address (0.0.0.0:PORT) already answers on every loopback address,
        the cluster IP included; a listener of ours on CLUSTERIP:PORT would keep it from binding at all."""
        tp = sp.get("targetPort", sp.get("port"))
        if not (isinstance(tp, str) and not tp.isdigit()):
            return int(tp) == sp["port"]
        sel = (svc.get("spec") or {}).get("selector") or {}
        if not sel:
            return False
        ns = meta(svc).get("namespace")
        ports = [cp.get("containerPort") for o in self.store.all(R_DEPLOY, ns) + self.store.all(R_STS, ns) +
                 self.store.all(R_RS, ns) + self.store.all(R_POD, ns)
                 for tm in [dig(o, "spec", "template") if o.get("kind") != "Pod" else o]
                 if all((dig(tm, "metadata", "labels", default={}) or {}).get(k) == v for k, v in sel.items())
                 for c in dig(tm, "spec", "containers", default=[]) or [] for cp in c.get("ports") or []
                 if cp.get("name") == tp]
        return sp["port"] in ports

    def close(self, key):
        ls = self.listeners.pop(key, None)
        if ls is not None:
            try:
                ls.shutdown(socket.SHUT_RDWR)  # wakes the accept
            except OSError:
                pass
            ls.close()

    def accept_loop(self, key, ls):
        while True:
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=self.forward, args=(key, conn), daemon=True, name="proxy-conn").start()

    def endpoints(self, key):
        ns, name, ip, port = key
        svc = self.store.peek(R_SVC, ns, name)
        spec = (svc or {}).get("spec") or {}
        sp = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        sel = spec.get("selector") or {}
        if svc is None or spec.get("clusterIP") != ip or sp is None or not sel:
            return []
        out = []
        for pod in self.store.all(R_POD, ns):
            labels = meta(pod).get("labels") or {}
            st = pod.get("status") or {}
            if any(labels.get(k) != v for k, v in sel.items()) or is_terminating(pod) or \
                    st.get("phase") != "Running" or not st.get("podIP"):
                continue
            if not (pod_ready(pod) or spec.get("publishNotReadyAddresses")):
                continue
            tp = sp.get("targetPort", port)
            if isinstance(tp, str) and not tp.isdigit():
                tp = next((cp.get("containerPort") for c in dig(pod, "spec", "containers", default=[]) or []
                           for cp in c.get("ports") or [] if cp.get("name") == tp and
                           cp.get("protocol", "TCP") == "TCP"), None)
                if tp is None:
                    continue
            out.append((st["podIP"], int(tp)))
        return out

    def forward(self, key, conn):
        eps = self.endpoints(key)
        random.shuffle(eps)
        up = None
        for ep in eps:
            try:
                up = socket.create_connection(ep, timeout=5)
                break
            except OSError:
                continue
        if up is None:
            return _reset(conn)
        up.settimeout(None)
        done = threading.Semaphore(0)

        def pump(src, dst):
            try:
                while True:
                    b = src.recv(65536)
                    if not b:
                        break
                    dst.sendall(b)
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                for x in (src, dst):
                    try:
                        x.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            done.release()
        threading.Thread(target=pump, args=(up, conn), daemon=True, name="proxy-down").start()
        pump(conn, up)
        done.acquire()
        conn.close()
        up.close()


# ==== HTTP handler ==================================================================================

class SimServer(ThreadingHTTPServer):
    """The listening socket; TLS per connection (handshake in the connection's thread); every open
    connection tracked so /_sim/unreachable can cut them all."""
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, ssl_ctx, sim):
        self.ssl_ctx, self.sim = ssl_ctx, sim
        self.conns = set()
        self.conns_lock = threading.Lock()
        ThreadingHTTPServer.__init__(self, addr, handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.ssl_ctx is not None:
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self.conns_lock:
            self.conns.add(sock)
        return sock, addr

    def shutdown_request(self, request):
        with self.conns_lock:
            self.conns.discard(request)
        ThreadingHTTPServer.shutdown_request(self, request)

    def cut_all(self):
        with self.conns_lock:
            conns = list(self.conns)
        for s in conns:
            try:
                socket.socket.shutdown(s, socket.SHUT_RDWR)
            except OSError:
                pass
        return len(conns)

    def handle_error(self, request, client_address):
        e = sys.exc_info()[1]
        if isinstance(e, (OSError, ssl.SSLError, ValueError)):
            if OPT.verbose:
                log("connection from %s:%s: %s" % (client_address[0], client_address[1], e))
            return
        ThreadingHTTPServer.handle_error(self, request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "apisim/1.33"
    sys_version = ""
    disable_nagle_algorithm = True  # watch events are small writes that must leave at once
    write_of = None  # the resource a write request is of (dispatch sets it per request)

    # -- plumbing

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        BaseHTTPRequestHandler.setup(self)

    def log_request(self, code="-", size="-"):
        if OPT.verbose:
            log("%s %s %s" % (self.command, self.path, code))

    def log_message(self, fmt, *args):
        if OPT.verbose:
            log("%s: %s" % (self.address_string(), fmt % args))

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def read_body(self):
        """The request body, or None when it is larger than MAX_REQUEST_BODY (then read and dropped, up to
        64 MiB, so the client gets to read the 413)."""
        def drain(n):
            while n > 0:
                got = self.rfile.read(min(n, 1 << 16))
                if not got:
                    break
                n -= len(got)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out, total = [], 0
            while True:
                n = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(out) if total <= MAX_REQUEST_BODY else None
                total += n
                if total > MAX_REQUEST_BODY:
                    out = []
                    if total > 64 << 20:
                        self.close_connection = True
                        return None
                    drain(n)
                else:
                    out.append(self.rfile.read(n))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_REQUEST_BODY:
            self.close_connection = True
            drain(min(n, 64 << 20))
            return None
        return self.rfile.read(n) if n > 0 else b""

    def send(self, code, body, ctype="application/json"):
        sim = self.server.sim
        kind = self.write_of
        if kind and code < 300:
            with sim.faults_lock:
                lose = sim.lost_answers.get(kind, 0) > 0
                if lose:
                    sim.lost_answers[kind] -= 1
                    sim.answers_lost += 1
            if lose:  # done, and the connection cut before the answer: the client cannot tell that it landed
                log("%s %s: done, the answer lost (/_sim/lose-answers)" % (self.command, self.path))
                self.close_connection = True
                return
        if not isinstance(body, bytes):
            body = (dumps(body) + "\n").encode() if ctype.startswith("application/json") else body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def json_body(self):
        if not self.body:
            raise err_bad("the request body is empty")
        if self.headers.get("Content-Type", "").startswith("application/vnd.kubernetes.protobuf"):
            try:
                return decode_protobuf(self.body)
            except (ProtoError, UnicodeDecodeError, KeyError) as e:
                raise ApiError(415, "UnsupportedMediaType", "apisim decodes protobuf only for Namespace, "
                               "ConfigMap, Secret, ServiceAccount, Service and RBAC objects (%s); send "
                               "application/json (kubectl apply -f, kubectl create -f)" % e, {})
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise err_bad("error decoding the request body as JSON: %s" % e)

    def authenticate(self, sim):
        """The caller: a service account (--sa-token, while its ServiceAccount exists), the admin (--token, or
        anyone when there is none); else 401."""
        h = self.headers.get("Authorization", "")
        tok = h[7:].strip().encode() if h.startswith("Bearer ") else None
        if tok:
            for t, (ns, sa) in OPT.sa_tokens.items():
                if hmac.compare_digest(tok, t.encode()):
                    if sim.store.peek(R_SA, ns, sa) is None:
                        break  # the token of a service account that does not exist is no token
                    return sa_user(ns, sa)
            else:
                with POD_TOKENS_LOCK:
                    bound = POD_TOKENS.get(tok.decode(errors="replace"))
                if bound is not None:  # a pod's token: while its ServiceAccount and its pod exist
                    ns, sa, uid = bound
                    if sim.store.peek(R_SA, ns, sa) is not None and any(
                            meta(p).get("uid") == uid for p in sim.store.all(R_POD, ns)):
                        return sa_user(ns, sa)
                elif not OPT.token or hmac.compare_digest(tok, OPT.token.encode()):
                    return ADMIN
        elif not OPT.token:
            return ADMIN
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def dispatch(self):
        sim = self.server.sim
        url = urlsplit(self.path)
        self.write_of = None  # this request's (the handler serves a connection's requests one after another)
        self.q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        try:
            self.body = self.read_body()  # None: over MAX_REQUEST_BODY (read and dropped)
            self.user = self.authenticate(sim)
            if not self.user.admin:
                ri = request_info(self.command, url.path or "/", self.q)
                ok, why = (False, "") if path.startswith("/_sim/") else authorize(sim.store, self.user, ri)
                if not ok:
                    raise err_forbidden(self.user, ri, why)
            if self.body is None:
                self.close_connection = True
                raise err_too_large()
            if path.startswith("/_sim/"):
                return self.sim_endpoint(sim, path[6:])
            if self.command not in ("GET", "HEAD") and not path.startswith(("/api/", "/apis/")):
                raise err_method()
            if path == "/":
                return self.send(200, {"paths": ["/api", "/api/v1", "/apis", "/openapi/v3", "/version",
                                                 "/healthz", "/_sim/pods"]})
            if path == "/version":
                return self.send(200, K8S_VERSION)
            if path in ("/healthz", "/livez", "/readyz"):
                return self.send(200, "ok", "text/plain; charset=utf-8")
            if path == "/api":
                return self.send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % sim.port}]})
            if path == "/apis":
                return self.send(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                       "groups": [api_group(g) for g in GROUPS if g]})
            if path.startswith("/openapi/"):
                return self.openapi(path)
            parts = [p for p in path.split("/") if p]
            if parts[0] == "api" and len(parts) == 2 and parts[1] in GROUPS[""]:
                return self.send(200, api_resource_list("", parts[1]))
            if parts[0] == "apis" and len(parts) == 2 and parts[1] in GROUPS:
                g = api_group(parts[1])
                g.update(kind="APIGroup", apiVersion="v1")
                return self.send(200, g)
            if parts[0] == "apis" and len(parts) == 3 and parts[2] in GROUPS.get(parts[1], ()):
                return self.send(200, api_resource_list(parts[1], parts[2]))
            return self.resource(sim, parts)
        except ApiError as e:
            self.send(e.code, e.status)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # a simulator bug: answer 500 and say where
            traceback.print_exc()
            try:
                self.send(500, status_obj(500, "InternalError", "Internal error occurred: %s" % e))
            except OSError:
                self.close_connection = True

    def openapi(self, path):
        if path == "/openapi/v3":
            return self.send(200, openapi_v3_root())
        m = re.match(r"^/openapi/v3/(api/(v1)|apis/([^/]+)/([^/]+))$", path)
        if m:
            group, version = (("", m.group(2)) if m.group(2) else (m.group(3), m.group(4)))
            if version in GROUPS.get(group, ()):
                return self.send(200, openapi_v3_doc(group, version))
        # no OpenAPI v2: kubectl falls back to its built-in types for client-side apply
        raise err_no_route()

    # -- /_sim/ fault and inspection endpoints

    def sim_endpoint(self, sim, what):
        if what == "healthz":
            return self.send(200, {"ok": True, "resourceVersion": str(sim.store.rv), "mountNamespaces": MOUNT_NS,
                                   "answersLost": sim.answers_lost})
        if what == "pods" and self.command == "GET":
            return self.send(200, sim.kubelet.sim_records())
        if self.command != "POST":
            raise err_method()
        if what == "drop-watches":
            return self.send(200, {"dropped": drop_watches(sim.store)})
        if what == "hold-watches":
            # every open watch dropped and new ones refused (503) for a while; everything else answers,
            # so a test can change things the watchers must then catch up with
            try:
                seconds = float(self.q.get("seconds", "5"))
            except ValueError:
                raise err_bad("seconds must be a number")
            sim.watches_held_until = time.monotonic() + seconds
            return self.send(200, {"dropped": drop_watches(sim.store), "held": seconds})
        if what == "hold-starts":
            # the kubelet starts no container for a while (new pods stay ContainerCreating, as while their image
            # pulls); seconds=0 ends the hold
            try:
                seconds = float(self.q.get("seconds", "5"))
            except ValueError:
                raise err_bad("seconds must be a number")
            sim.store.starts_held_until = time.monotonic() + seconds
            for k in sim.store.kicks:
                k.set()
            return self.send(200, {"held": seconds})
        if what == "lose-answers":
            # the next N writes (create, update, patch) of one resource are done, and their connection is
            # cut before the answer: what a client sees when a proxy or the network fails at that moment
            try:
                count = int(self.q.get("count", "1"))
            except ValueError:
                count = -1
            if count < 0:
                raise err_bad("count must be a whole number, 0 or more")
            resource = self.q.get("resource", "")
            if not any(r.plural == resource for r in BY_GVR.values()):
                raise err_bad("resource must be a served resource's plural, such as configmaps")
            with sim.faults_lock:
                sim.lost_answers[resource] = count
                lost = sim.answers_lost
            return self.send(200, {"resource": resource, "count": count, "answersLost": lost})
        if what == "compact":
            return self.send(200, {"compacted": str(sim.store.compact())})
        if what == "unreachable":
            try:
                seconds = float(self.q.get("seconds", "5"))
            except ValueError:
                raise err_bad("seconds must be a number")
            self.send(200, {"unreachable": seconds})
            self.close_connection = True
            threading.Thread(target=sim.go_dark, args=(seconds,), daemon=True, name="unreachable").start()
            return
        raise err_no_route()

    # -- resources

    def resource(self, sim, parts):
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise err_no_route()
        watch_path = False
        if rest and rest[0] == "watch":  # the deprecated /watch/ paths
            watch_path, rest = True, rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in BY_GVR and \
                BY_GVR[(group, version, rest[2])].namespaced:
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise err_no_route()
        res = BY_GVR.get((group, version, rest[0]))
        if res is None:
            raise err_no_route()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (res.namespaced and ns is None and name is not None) or (not res.namespaced and ns is not None):
            raise err_no_route()
        if sub is not None and sub not in [s[0] for s in res.subresources]:
            raise err_no_route()
        store, cmd, q = sim.store, self.command, self.q
        dry = q.get("dryRun") == "All"
        if cmd in ("POST", "PUT", "PATCH") and sub is None and not dry:
            self.write_of = res.plural  # its answer may be lost (/_sim/lose-answers)
        if watch_path or (name is None and cmd == "GET" and q.get("watch") in ("1", "true", "True")):
            if name is not None:  # /watch/namespaces/ns/pods/name
                q["fieldSelector"] = ",".join(x for x in (q.get("fieldSelector"), "metadata.name=" + name) if x)
            return self.watch(sim, res, ns)
        if name is None:
            if cmd in ("GET", "HEAD"):
                return self.list(store, res, ns)
            if cmd == "POST":
                if res.namespaced and ns is None:
                    raise err_method()
                return self.send(201, store.create(res, ns, self.json_body(), dry))
            if cmd == "DELETE" and res not in (R_NS, BY_KEY[("", "nodes")]):  # no deletecollection there
                return self.delete_collection(store, res, ns, dry)
            raise err_method()
        if sub == "log":
            if cmd != "GET":
                raise err_method()
            return self.logs(sim, ns, name)
        if sub == "scale":
            return self.scale(store, res, ns, name, dry)
        if sub == "eviction":
            if cmd != "POST":
                raise err_method()
            return self.evict(store, ns, name)
        if cmd in ("GET", "HEAD"):
            obj = store.get(res, ns, name)
            if self.wants_table():
                return self.send(200, to_table(res, [obj], self.q.get("includeObject", "Metadata"),
                                               meta(obj).get("resourceVersion")))
            return self.send(200, obj)
        if cmd == "PUT":
            return self.send(200, store.update(res, ns, name, self.json_body(), sub, dry))
        if cmd == "PATCH":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in PATCH_TYPES:
                raise err_media(ctype)
            obj, code = store.patch(res, ns, name, ctype, self.json_body(), sub, dry)
            return self.send(code, obj)
        if cmd == "DELETE":
            opts = self.delete_options()
            obj, code = store.delete(res, ns, name, opts, dry)
            if res is R_POD or is_terminating(obj):
                return self.send(code, obj)
            return self.send(200, status_obj(200, None, None, {"name": name, "group": res.group,
                                                               "kind": res.plural, "uid": meta(obj).get("uid")},
                                             status="Success"))
        raise err_method()

    def evict(self, store, ns, name):
        """The pods/eviction subresource (policy/v1 or v1beta1 Eviction), as the real EvictionREST: the pod is
        deleted gracefully like a DELETE, unless that would break the PodDisruptionBudget covering it."""
        body = self.json_body()
        if body.get("kind") != "Eviction" or body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
            raise err_bad("the body is not a policy/v1 Eviction (kind %r, apiVersion %r)" %
                          (body.get("kind"), body.get("apiVersion")))
        em = body.get("metadata") or {}
        if em.get("name") != name:
            raise err_bad("name in URL does not match name in Eviction object")
        if em.get("namespace") and em["namespace"] != ns:
            raise err_bad("the namespace of the provided object does not match the namespace sent on the request")
        opts = dict(body.get("deleteOptions") or {})
        dry = self.q.get("dryRun") == "All" or "All" in (opts.get("dryRun") or [])
        ok = status_obj(201, None, None, status="Success")
        with store.lock:  # the budget's check, its update and the deletion at once
            pod = store.get(R_POD, ns, name)
            phase = dig(pod, "status", "phase", default="Pending")
            pdbs = [] if is_terminating(pod) or phase in ("Succeeded", "Failed", "Pending") else \
                self.covering_budgets(store, ns, name)  # nothing to protect in the first case
            if len(pdbs) > 1:
                raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                               "eviction subresource does not support.", {})
            if pdbs:
                pdb = pdbs[0]
                bst, bm = pdb.get("status") or {}, meta(pdb)
                desired, healthy = bst.get("desiredHealthy", 0), bst.get("currentHealthy", 0)
                policy = dig(pdb, "spec", "unhealthyPodEvictionPolicy", default="IfHealthyBudget")
                unhealthy_ok = not pod_ready(pod) and (policy == "AlwaysAllow" or
                                                       (healthy >= desired and desired > 0))
                if not unhealthy_ok:
                    def refuse(why):
                        return ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                        "disruption budget.", {"causes": [{"reason": "DisruptionBudget",
                                                                           "message": why}]})
                    if bst.get("observedGeneration", 0) < bm.get("generation", 1):
                        raise refuse("The disruption budget %s is still being processed by the server." %
                                     bm["name"])
                    if bst.get("disruptionsAllowed", 0) <= 0:
                        raise refuse("The disruption budget %s needs %d healthy pods and has %d currently" %
                                     (bm["name"], desired, healthy))
                    if not dry:
                        def take(o):
                            s = o.setdefault("status", {})
                            s["disruptionsAllowed"] = s.get("disruptionsAllowed", 0) - 1
                            s.setdefault("disruptedPods", {})[name] = now_ts()
                        store.mutate(R_PDB, ns, bm["name"], take, uid=bm.get("uid"))
            store.delete(R_POD, ns, name, opts, dry)
        return self.send(201, ok)

    @staticmethod
    def covering_budgets(store, ns, name):
        return [b for b in store.all(R_PDB, ns) if not is_terminating(b) and
                any(meta(p)["name"] == name for p in pdb_pods(store, b))]

    def delete_options(self):
        opts = self.json_body() if self.body.strip() else {}
        for k in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
            if k in self.q:
                v = self.q[k]
                opts[k] = int(v) if k == "gracePeriodSeconds" else (v == "true" if k == "orphanDependents" else v)
        return opts

    def wants_table(self):
        return "as=Table" in self.headers.get("Accept", "")

    def selectors(self):
        return LabelSelector(self.q.get("labelSelector", "")), FieldSelector(self.q.get("fieldSelector", ""))

    def list(self, store, res, ns):
        lsel, fsel = self.selectors()
        items, rv = store.list(res, ns, lsel, fsel)
        if self.wants_table():
            return self.send(200, to_table(res, items, self.q.get("includeObject", "Metadata"), rv))
        # limit is accepted and ignored: every list is answered whole, without `continue`
        return self.send(200, {"kind": res.kind + "List", "apiVersion": res.api_version,
                               "metadata": {"resourceVersion": rv}, "items": items})

    def delete_collection(self, store, res, ns, dry):
        lsel, fsel = self.selectors()
        opts = self.delete_options()
        items, rv = store.list(res, ns, lsel, fsel)
        for o in items:
            try:
                store.delete(res, meta(o).get("namespace"), meta(o)["name"], opts, dry)
            except ApiError:
                pass
        return self.send(200, {"kind": res.kind + "List", "apiVersion": res.api_version,
                               "metadata": {"resourceVersion": str(store.rv)}, "items": items})

    def scale(self, store, res, ns, name, dry):
        """The autoscaling/v1 Scale subresource of a StatefulSet or Deployment."""
        def as_scale(o):
            m = meta(o)
            return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                    "metadata": {"name": m["name"], "namespace": m.get("namespace"), "uid": m.get("uid"),
                                 "resourceVersion": m.get("resourceVersion"),
                                 "creationTimestamp": m.get("creationTimestamp")},
                    "spec": {"replicas": dig(o, "spec", "replicas", default=1)},
                    "status": {"replicas": dig(o, "status", "replicas", default=0),
                               "selector": selector_from_label_selector(dig(o, "spec", "selector"))}}
        cur = store.get(res, ns, name)
        if self.command == "GET":
            return self.send(200, as_scale(cur))
        if self.command == "PUT":
            body = self.json_body()
        elif self.command == "PATCH":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in PATCH_TYPES:
                raise err_media(ctype)
            body = Store._patched(as_scale(cur), ctype, self.json_body())
        else:
            raise err_method()
        replicas = dig(body, "spec", "replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Invalid", 'Scale.autoscaling "%s" is invalid: spec.replicas: Invalid value: %s: '
                           'must be greater than or equal to 0' % (name, dumps(replicas)))
        rv = dig(body, "metadata", "resourceVersion")
        if rv and rv != meta(cur).get("resourceVersion"):
            raise err_conflict(res, name)
        cur["spec"]["replicas"] = replicas
        out = store.update(res, ns, name, cur, None, dry, check_rv=False)
        return self.send(200, as_scale(out))

    # -- watch

    def watch(self, sim, res, ns):
        if time.monotonic() < sim.watches_held_until:
            raise ApiError(503, "ServiceUnavailable", "watches are held (/_sim/hold-watches)")
        store = sim.store
        lsel, fsel = self.selectors()
        rv = self.q.get("resourceVersion", "")
        since = None
        if rv not in ("", "0"):
            try:
                since = int(rv)
            except ValueError:
                raise err_bad('invalid resource version: "%s"' % rv)
        timeout = float(self.q["timeoutSeconds"]) if self.q.get("timeoutSeconds") else None
        bookmarks = self.q.get("allowWatchBookmarks") in ("1", "true", "True")
        table = self.wants_table()
        include = self.q.get("includeObject", "Metadata")
        def bookmark(rv, initial_end):
            # only the bookmark ending the initial events (sendInitialEvents=true) carries the annotation:
            # client-go's reflector ends a watch when it sees it
            m = {"resourceVersion": rv}
            if initial_end:
                m["annotations"] = {"k8s.io/initial-events-end": "true"}
            return {"kind": res.kind, "apiVersion": res.api_version, "metadata": m}

        send_initial = self.q.get("sendInitialEvents") in ("1", "true", "True")
        if send_initial:
            since = None  # a watch-list: every object, then a bookmark saying so
        w = Watcher(res, ns, lsel, fsel, self.request)
        expired = None
        try:
            store.watch(w, since, bookmark(None, True) if send_initial and bookmarks else None)
        except ApiError as e:
            if e.code != 410:
                raise
            expired = e.status
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.close_connection = False
        first_table = [True]

        def encode(type_, obj):
            if table and type_ != "BOOKMARK" and type_ != "ERROR":
                obj = to_table(res, [obj], include, meta(obj).get("resourceVersion"), columns=first_table[0])
                first_table[0] = False
            return (dumps({"type": type_, "object": obj}) + "\n").encode()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            if OPT.trace_watches:
                with TRACE_LOCK, open(OPT.trace_watches, "ab") as f:
                    f.write(b"%.3f watch %d %s chunk %r\n" % (time.time(), w.id, self.path.encode(), data))

        try:
            if expired is not None:  # 200, one ERROR event, a clean end: what the real server does
                chunk(encode("ERROR", expired))
                self.wfile.write(b"0\r\n\r\n")
                return
            end = time.monotonic() + timeout if timeout is not None else None
            interval = OPT.bookmark_interval
            next_bm = time.monotonic() + interval if bookmarks else None
            while True:
                now = time.monotonic()
                waits = [t - now for t in (end, next_bm) if t is not None]
                try:
                    item = w.q.get(timeout=max(0.0, min(waits)) if waits else 1.0)
                except queue.Empty:
                    now = time.monotonic()
                    if sim.stop.is_set():
                        raise ConnectionAbortedError("the simulator is stopping")
                    if select.select([self.request], [], [], 0)[0]:
                        # a streaming client sends nothing: readable means it closed (or sent a TLS alert)
                        raise ConnectionAbortedError("the client went away")
                    if end is not None and now >= end:
                        self.wfile.write(b"0\r\n\r\n")  # timeoutSeconds: a clean end
                        return
                    if next_bm is not None and now >= next_bm:
                        next_bm = now + interval
                        with store.lock:  # every event up to this version is already written
                            bm_rv = str(store.rv) if w.q.empty() else None
                        if bm_rv:
                            chunk(encode("BOOKMARK", bookmark(bm_rv, False)))
                    continue
                if item is DROP:
                    raise ConnectionAbortedError("dropped")
                data = encode(*item)
                r = w.rng.random()
                if r < OPT.chunk_chaos / 2 and len(data) > 2:
                    # one event across two chunks: clients must buffer partial lines
                    cut = w.rng.randrange(1, len(data) - 1)
                    chunk(data[:cut])
                    time.sleep(0.002)
                    chunk(data[cut:])
                    continue
                if r < OPT.chunk_chaos:
                    # two events in one chunk, when a second is ready
                    try:
                        nxt = w.q.get_nowait()
                        if nxt is DROP:
                            w.q.put(DROP)
                        else:
                            data += encode(*nxt)
                    except queue.Empty:
                        pass
                chunk(data)
        except (OSError, ConnectionAbortedError, ValueError):
            # dropped, cut or the client went: end without a terminating chunk
            self.close_connection = True
            try:
                socket.socket.shutdown(self.request, socket.SHUT_RDWR)
            except OSError:
                pass
        finally:
            store.unwatch(w)

    # -- logs

    def logs(self, sim, ns, name):
        pod = sim.store.get(R_POD, ns, name)
        names = [c.get("name") for c in dig(pod, "spec", "containers", default=[]) or []]
        inits = [c.get("name") for c in dig(pod, "spec", "initContainers", default=[]) or []]
        c = self.q.get("container")
        if not c:
            if len(names) != 1:
                raise err_bad("a container name must be specified for pod %s, choose one of: [%s]"
                              % (name, " ".join(names)))
            c = names[0]
        if c not in names + inits:
            raise err_bad("container %s is not valid for pod %s" % (c, name))
        rt = sim.kubelet.runtime(meta(pod)["uid"])
        cont = next((x for x in rt.all() if x.name == c), None) if rt else None
        path = sim.kubelet.log_path(ns, name, c)
        if cont is None or not cont.log_starts:
            raise err_bad('container "%s" in pod "%s" is waiting to start: %s' % (
                c, name, cont.waiting_reason if cont else "ContainerCreating"))
        # the file keeps every instance of the container; the API shows the current one (or the previous)
        start, end = cont.log_starts[-1], None
        if self.q.get("previous") in ("1", "true"):
            if len(cont.log_starts) < 2:
                raise err_bad('previous terminated container "%s" in pod "%s" not found' % (c, name))
            start, end = cont.log_starts[-2], cont.log_starts[-1]
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read() if end is None else f.read(end - start)
        except OSError:
            data = b""
        if self.q.get("tailLines"):
            n = int(self.q["tailLines"])
            lines = data.splitlines(True)
            data = b"".join(lines[-n:]) if n > 0 else b""
        if self.q.get("limitBytes"):
            data = data[:int(self.q["limitBytes"])]
        if self.q.get("follow") not in ("1", "true"):
            return self.send(200, data, "text/plain")
        # follow: stream what the container writes until it (or the pod) ends
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pos = start + len(data) if not self.q.get("tailLines") else os.path.getsize(path)
        try:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            while not sim.stop.is_set():
                time.sleep(0.1)
                with open(path, "rb") as f:
                    f.seek(pos)
                    more = f.read()
                if more:
                    pos += len(more)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(more), more))
                elif cont is None or cont.state != "running" or sim.kubelet.runtime(meta(pod)["uid"]) is None:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True


# ==== main ==========================================================================================

class Simulator:
    """The store, the controllers, the kubelet and the (restartable) HTTP server."""

    def __init__(self, opt):
        self.opt = opt
        self.stop = threading.Event()
        self.store = Store(opt.history)
        self.watches_held_until = 0.0  # /_sim/hold-watches
        self.lost_answers = {}  # /_sim/lose-answers: resource plural -> writes left whose answer is lost
        self.answers_lost = 0
        self.faults_lock = threading.Lock()
        self.ssl_ctx = None
        self.port = opt.port
        self.server = None
        self.server_lock = threading.Lock()
        self.down = False
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.store.create(R_NS, None, {"metadata": {"name": ns}}, internal=True)
        self.store.create(BY_KEY[("", "nodes")], None, {
            "metadata": {"name": opt.node_name, "labels": {"kubernetes.io/hostname": opt.node_name,
                                                            "kubernetes.io/os": "linux"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
            internal=True)
        bin_dirs = [os.path.abspath(d) for spec in opt.bin_dir for d in spec.split(os.pathsep) if d]
        self.kubelet = Kubelet(self.store, self.stop, os.path.abspath(opt.root), bin_dirs, opt.node_name)
        self.controllers = Controllers(self.store, self.stop)
        self.proxy = KubeProxy(self.store, self.stop)

    def make_tls(self, d):
        """A CA and a server certificate for 127.0.0.1 and localhost, made with the openssl tool (kept if
        already there, so a restarted simulator keeps its kubeconfig valid)."""
        os.makedirs(d, exist_ok=True)
        ca, crt, key = (os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key"))
        if not all(os.path.exists(p) for p in (ca, crt, key)):
            cakey, csr, ext = (os.path.join(d, n) for n in ("ca.key", "server.csr", "server.ext"))
            with open(ext, "w") as f:
                f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
            ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
            run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
            try:
                run("req", "-x509", *ec, "-keyout", cakey, "-out", ca, "-days", "3650", "-subj", "/CN=apisim-ca",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
                run("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=apisim")
                run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cakey, "-CAcreateserial", "-out", crt,
                    "-days", "3650", "-extfile", ext)
            except subprocess.CalledProcessError as e:
                sys.exit("apisim: openssl failed: %s" % e.stderr.decode(errors="replace"))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        ctx.set_alpn_protocols(["http/1.1"])  # no h2: kubectl then speaks HTTP/1.1
        self.ssl_ctx = ctx

    def listen(self):
        for attempt in range(100):
            try:
                srv = SimServer(("127.0.0.1", self.port), Handler, self.ssl_ctx, self)
                break
            except OSError:
                if attempt == 99:
                    raise
                time.sleep(0.1)
        self.port = srv.server_address[1]
        self.server = srv
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True,
                         name="http").start()

    def go_dark(self, seconds):
        """/_sim/unreachable: nothing listens and every connection is cut; the rest goes on."""
        with self.server_lock:
            time.sleep(0.05)  # let the answer to the request leave first
            srv = self.server
            srv.shutdown()
            srv.server_close()
            drop_watches(self.store)
            srv.cut_all()
            log("unreachable for %gs" % seconds)
            if self.stop.wait(seconds):
                return
            self.listen()
            log("reachable again on port %d" % self.port)

    def write_kubeconfig(self, path, token=None, namespace="default", user="apisim"):
        """A kubeconfig for the admin (--token), or with token and namespace for a service account."""
        token = self.opt.token if token is None else token
        scheme = "https" if self.ssl_ctx else "http"
        lines = ["apiVersion: v1", "kind: Config", "clusters:", "- name: apisim", "  cluster:",
                 "    server: %s://127.0.0.1:%d" % (scheme, self.port)]
        if self.ssl_ctx:
            lines.append("    certificate-authority: %s" % os.path.abspath(os.path.join(self.opt.tls_dir, "ca.crt")))
        lines += ["contexts:", "- name: apisim", "  context:", "    cluster: apisim", "    user: %s" % user,
                  "    namespace: %s" % namespace, "current-context: apisim", "users:", "- name: %s" % user,
                  "  user:"]
        lines.append("    token: %s" % token if token else "    {}")
        lines.append("preferences: {}")
        atomic_write(path, "\n".join(lines) + "\n")

    def shutdown(self):
        """Stop everything; the kubelet thread SIGTERMs (then SIGKILLs) every container as it ends."""
        if self.down:
            return
        self.down = True
        self.stop.set()
        if self.kubelet.is_alive():
            self.kubelet.join(5)
        else:
            self.kubelet.shutdown()
        srv = self.server
        if srv is not None:
            srv.cut_all()


def atomic_write(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    global OPT
    ap = argparse.ArgumentParser(description="A Kubernetes API server simulator with a process-running kubelet.")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--token", default="", help="bearer token every request must carry (none: no auth)")
    ap.add_argument("--sa-token", action="append", default=[], metavar="NS/SA=TOKEN",
                    help="a bearer token that authenticates as service account SA of namespace NS (while it "
                         "exists), authorized by the stored RBAC objects (repeatable)")
    ap.add_argument("--sa-kubeconfig-out", action="append", default=[], metavar="NS/SA=FILE",
                    help="write a kubeconfig with the --sa-token of NS/SA (context namespace NS) here (repeatable)")
    ap.add_argument("--tls-dir", help="make a CA and a server certificate here with openssl and serve HTTPS")
    ap.add_argument("--kubeconfig-out", help="write a kubeconfig for kubectl and the coordinator here")
    ap.add_argument("--root", default=None, help="sandbox for pods: <root>/<ns>/<pod>/ (default: a temp dir)")
    ap.add_argument("--bin-dir", action="append", default=[],
                    help="where container commands are looked up before PATH (repeatable, or colon-separated)")
    ap.add_argument("--bookmark-interval", type=float, default=60.0,
                    help="seconds between watch bookmarks (a real API server: about once a minute)")
    ap.add_argument("--history", type=int, default=10000, help="events kept for watches to resume from")
    ap.add_argument("--seed", type=int, default=1, help="seed for the watch chunking chaos")
    ap.add_argument("--chunk-chaos", type=float, default=0.3,
                    help="probability an event is split across chunks or shares one (0: never)")
    ap.add_argument("--restart-backoff", type=float, default=1.0,
                    help="first container restart delay in seconds; doubles up to 10")
    ap.add_argument("--removal-delay", type=float, default=0.5,
                    help="a gracefully deleted pod is removed no sooner than this many seconds after its deletion")
    ap.add_argument("--trace-watches", metavar="FILE", help="debugging: append every watch event written to FILE")
    ap.add_argument("--kill-after-exit", action="store_true",
                    help="when a container's main process exits, SIGKILL the rest of its process group "
                         "(what a runtime does to the container's cgroup)")
    ap.add_argument("--node-name", default="sim-node")
    ap.add_argument("--pod-ip-start", default="127.0.1.1", help="first pod address (loopback, 127.x.y.z)")
    ap.add_argument("--deployments", choices=("run", "store"), default="run",
                    help="run Deployments (ReplicaSets and their pods), or only store them (tests that run the "
                         "coordinator by hand)")
    ap.add_argument("--service-ip-start", default="127.1.0.1",
                    help="first Service cluster IP allocated (loopback, 127.x.y.z); the kube-proxy listens there")
    ap.add_argument("--schemas", default="auto", metavar="DIR|auto|off",
                    help="kubernetes-models' directory: every object stored is validated against its kind's schema "
                         "with node (auto: tools/node_modules/kubernetes-models of this checkout)")
    ap.add_argument("--verbose", "-v", action="store_true", help="log one line per request to stderr")
    OPT = ap.parse_args(argv)
    global SCHEMAS
    if OPT.schemas != "off":
        models = OPT.schemas if OPT.schemas != "auto" else os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "node_modules", "kubernetes-models")
        if not os.path.isdir(models) or not shutil.which("node"):
            ap.error("--schemas %s: needs node and kubernetes-models at %s (make tools), or --schemas off"
                     % (OPT.schemas, models))
        SCHEMAS = Schemas(os.path.realpath(models))
        atexit.register(SCHEMAS.close)
    OPT.sa_tokens = {}  # token -> (namespace, service account)
    for spec in OPT.sa_token:
        m = re.match(r"^([a-z0-9][-a-z0-9]*)/([a-z0-9][-a-z0-9.]*)=(\S+)$", spec)
        if not m:
            ap.error("--sa-token wants NAMESPACE/SERVICEACCOUNT=TOKEN, not %r" % spec)
        if m.group(3) == OPT.token or m.group(3) in OPT.sa_tokens:
            ap.error("--sa-token %s: that token is already someone's" % spec)
        OPT.sa_tokens[m.group(3)] = (m.group(1), m.group(2))
    sa_kubeconfigs = []
    for spec in OPT.sa_kubeconfig_out:
        who, _, path = spec.partition("=")
        tok = [t for t, nsa in OPT.sa_tokens.items() if "%s/%s" % nsa == who]
        if not path or not tok:
            ap.error("--sa-kubeconfig-out %s: wants NS/SA=FILE with a --sa-token for NS/SA" % spec)
        sa_kubeconfigs.append((path, tok[0], who))
    global NODE_NAME
    NODE_NAME = OPT.node_name
    if not re.match(r"^127\.\d+\.\d+\.\d+$", OPT.pod_ip_start):
        ap.error("--pod-ip-start must be a 127.x.y.z address")
    if not re.match(r"^127\.\d+\.\d+\.\d+$", OPT.service_ip_start):
        ap.error("--service-ip-start must be a 127.x.y.z address")
    if OPT.root is None:
        import tempfile
        OPT.root = tempfile.mkdtemp(prefix="apisim-")
    os.makedirs(OPT.root, exist_ok=True)
    global MOUNT_NS, CA_PEM, API_PORT
    if (os.path.realpath(OPT.root) + "/").startswith(RUN_DIR + "/"):
        log("the pods' root is under %s: no mount namespaces (service-account tokens only where paths are "
            "rewritten)" % RUN_DIR)
    else:
        MOUNT_NS = mount_ns_works(os.path.realpath(OPT.root))
        if not MOUNT_NS:
            log("no mount namespaces here (not root, and no user namespaces): a container does not find its "
                "service-account token at %s" % SA_DIR)

    sim = Simulator(OPT)
    if OPT.tls_dir:
        sim.make_tls(OPT.tls_dir)
        with open(os.path.join(OPT.tls_dir, "ca.crt")) as f:
            CA_PEM = f.read()
        for nso in sim.store.all(R_NS):
            sim.store.mutate(R_CM, meta(nso)["name"], "kube-root-ca.crt", lambda o: o.update(data={"ca.crt": CA_PEM}))
    atexit.register(sim.shutdown)

    def on_signal(signum, frame):
        sim.stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    sim.listen()
    API_PORT = sim.port
    sim.kubelet.start()
    sim.controllers.start()
    sim.proxy.start()
    if OPT.kubeconfig_out:
        sim.write_kubeconfig(OPT.kubeconfig_out)
    for path, tok, who in sa_kubeconfigs:
        ns, sa = who.split("/")
        sim.write_kubeconfig(path, tok, ns, "sa-%s-%s" % (ns, sa))
    if OPT.port_file:
        atomic_write(OPT.port_file, "%d\n" % sim.port)
    log("listening on %s://127.0.0.1:%d, pods under %s" % ("https" if sim.ssl_ctx else "http", sim.port, OPT.root))
    while not sim.stop.wait(0.5):
        pass
    sim.shutdown()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
