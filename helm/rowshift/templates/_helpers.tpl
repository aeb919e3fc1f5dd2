{{/*
Names. Every object is named after the release: with the release `rowshift`
the names are exactly those of the plain manifests (manifests/).
The StatefulSet's name plus "-" and a 10-character revision hash must fit the
63-character label limit, hence the release name's limit of 45.
*/}}
{{- define "rowshift.fullname" -}}
{{- if gt (len .Release.Name) 45 -}}
{{- fail (printf "the release name %q is longer than 45 characters (the worker StatefulSet's name must leave room for its pods' revision labels)" .Release.Name) -}}
{{- end -}}
{{- .Release.Name -}}
{{- end -}}

{{- define "rowshift.coordinator" -}}{{ include "rowshift.fullname" . }}-coordinator{{- end -}}
{{- define "rowshift.worker" -}}{{ include "rowshift.fullname" . }}-worker{{- end -}}
{{- define "rowshift.joinToken" -}}{{ include "rowshift.fullname" . }}-join-token{{- end -}}
{{- define "rowshift.model" -}}{{ include "rowshift.fullname" . }}-model{{- end -}}
{{- define "rowshift.state" -}}{{ include "rowshift.fullname" . }}-state{{- end -}}
{{/* The coordinator's leader Lease (coordination.k8s.io): its default name, STATEFULSET-leader, given explicitly. */}}
{{- define "rowshift.lease" -}}{{ include "rowshift.worker" . }}-leader{{- end -}}

{{/* The image reference: repository@digest when image.digest is set (the tag is then not used), else repository:tag. */}}
{{- define "rowshift.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The Secret holding the join token (key token) and the optional status token (key status-token): the user's existingSecret, or the chart's. */}}
{{- define "rowshift.tokenSecret" -}}
{{- .Values.existingSecret | default (include "rowshift.joinToken" .) -}}
{{- end -}}

{{/*
Extra list items the user adds to a list the chart renders (env, volumes,
volumeMounts), refused when one has the same key (name, mountPath) as an item
of the chart's: Kubernetes would take one of the two silently, and server-side
apply (Helm 4) refuses a list with duplicate keys. Include with
(dict "what" "worker.extraEnv" "base" LIST "extra" LIST "key" "name").
*/}}
{{- define "rowshift.extraItems" -}}
{{- $taken := dict -}}
{{- range .base -}}{{- $_ := set $taken (toString (get . $.key)) true -}}{{- end -}}
{{- range .extra -}}
{{- $k := toString (get . $.key) -}}
{{- if hasKey $taken $k -}}
{{- fail (printf "%s: %s %q is already set by the chart (or twice in %s)" $.what $.key $k $.what) -}}
{{- end -}}
{{- $_ := set $taken $k true -}}
{{- end -}}
{{- with .extra -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/*
The pod template's labels and annotations: the chart's, then the component's
podLabels and podAnnotations (the schema refuses podLabels that would change
the selector labels; for those the chart's win here too). Include with
(dict "ctx" $ "component" "worker" "values" .Values.worker "annotations" DICT).
*/}}
{{- define "rowshift.podMetadata" -}}
{{- $labels := merge (include "rowshift.podLabels" (dict "ctx" .ctx "component" .component) | fromYaml) (.values.podLabels | default dict) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- $ann := mergeOverwrite (deepCopy (.annotations | default dict)) (.values.podAnnotations | default dict) -}}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
Pod-level settings shared in form by both pods, from the component's values:
priorityClassName, runtimeClassName, nodeSelector, tolerations, affinity,
topologySpreadConstraints (a constraint without a labelSelector gets the
component's selector labels). Include with
(dict "ctx" $ "component" "worker" "values" .Values.worker).
*/}}
{{- define "rowshift.podPlacement" -}}
{{- with .values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .values.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
{{- $sel := include "rowshift.selectorLabels" $.ctx | fromYaml }}
{{- $_ := set $sel "app.kubernetes.io/component" $.component }}
{{- $out := list }}
{{- range . }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}{{- $_ := set $c "labelSelector" (dict "matchLabels" $sel) }}{{- end }}
{{- $out = append $out $c }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $out | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Labels that select pods: name, instance; the component is added per object. */}}
{{- define "rowshift.selectorLabels" -}}
app.kubernetes.io/name: rowshift
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels of the pods: include with (dict "ctx" $ "component" "worker"). No
chart version here: a chart upgrade that changes nothing else must not roll
the workers (each rolled worker is two reshards).
*/}}
{{- define "rowshift.podLabels" -}}
{{ include "rowshift.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: rowshift
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{/* Labels on every object: the pods' labels, the version and the chart. */}}
{{- define "rowshift.labels" -}}
{{ include "rowshift.podLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The join token: values.joinToken, else the one already in the cluster (kept across upgrades), else a new random one. */}}
{{- define "rowshift.joinTokenValue" -}}
{{- if .Values.joinToken -}}
{{- .Values.joinToken -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "rowshift.joinToken" .) -}}
{{- if and $existing $existing.data (index $existing.data "token") -}}
{{- index $existing.data "token" | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* model.json: modelJson as given when set (it must be a JSON object), else values.model as pretty JSON. */}}
{{- define "rowshift.modelJson" -}}
{{- if .Values.modelJson -}}
{{- $parsed := fromJson .Values.modelJson -}}
{{- if or (hasKey $parsed "Error") (not (hasKey $parsed "tables")) -}}
{{- fail "modelJson must be a JSON object with a \"tables\" key (the model config)" -}}
{{- end -}}
{{- .Values.modelJson -}}
{{- else -}}
{{- toPrettyJson .Values.model -}}
{{- end -}}
{{- end -}}

{{/* Volumes shared by both pods: the model config (read-only) and a scratch /tmp. */}}
{{- define "rowshift.volumes" -}}
- name: model
  configMap:
    name: {{ include "rowshift.model" . }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "rowshift.volumeMounts" -}}
- name: model
  mountPath: /etc/rowshift
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The coordinator's environment (the chart's part; coordinator.extraEnv follows it). */}}
{{- define "rowshift.coordinator.env" -}}
- name: ROWSHIFT_JOIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rowshift.tokenSecret" . }}
      key: token
{{- if .Values.statusToken }}
- name: ROWSHIFT_STATUS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rowshift.joinToken" . }}
      key: status-token
{{- else if .Values.existingSecret }}
# the status token, if the Secret has one
- name: ROWSHIFT_STATUS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: status-token
      optional: true
{{- end }}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
# single leader: the Lease it must hold to work, and its identity there (the pod's name)
- name: ROWSHIFT_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: ROWSHIFT_LEASE
  value: {{ include "rowshift.lease" . | quote }}
{{- $svc := include "rowshift.coordinator" . }}
{{- $ns := .Release.Namespace }}
{{- if .Values.tls.secretName }}
- name: ROWSHIFT_TLS_CERT
  value: /etc/rowshift-tls/tls.crt
- name: ROWSHIFT_TLS_KEY
  value: /etc/rowshift-tls/tls.key
{{- end }}
- name: ROWSHIFT_ALLOWED_HOSTS
  value: {{ concat (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) .Values.coordinator.allowedHosts | join "," | quote }}
# The coordinator uses no GPU: the CUDA base image's NVIDIA_VISIBLE_DEVICES=all
# would give it every GPU of its node, outside the scheduler's accounting.
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end -}}

{{/*
The coordinator's tolerations: the chart's for a failed node
(node.kubernetes.io/not-ready and unreachable, NoExecute, for
coordinator.nodeFailureTolerationSeconds instead of the cluster's default
300 s), then coordinator.tolerations. An entry of the user's with the same key
and effect NoExecute (or no effect, which matches every effect) replaces the
chart's; the user's others are appended.
*/}}
{{- define "rowshift.coordinator.tolerations" -}}
{{- $user := .Values.coordinator.tolerations | default list -}}
{{- $out := list -}}
{{- range $k := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" -}}
{{- $given := false -}}
{{- range $user -}}
{{- if and (eq (toString (get . "key")) $k) (has (toString (get . "effect")) (list "" "NoExecute")) -}}{{- $given = true -}}{{- end -}}
{{- end -}}
{{- if not $given -}}
{{- $out = append $out (dict "key" $k "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int64 $.Values.coordinator.nodeFailureTolerationSeconds)) -}}
{{- end -}}
{{- end -}}
{{- toYaml (concat $out $user) -}}
{{- end -}}

{{- define "rowshift.coordinator.volumeMounts" -}}
{{ include "rowshift.volumeMounts" . }}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: /etc/rowshift-tls
  readOnly: true
{{- end }}
{{- if .Values.checkpoint.existingClaim }}
- name: checkpoints
  mountPath: /checkpoints
{{- end }}
{{- end -}}

{{- define "rowshift.coordinator.volumes" -}}
{{ include "rowshift.volumes" . }}
{{- with .Values.checkpoint.existingClaim }}
- name: checkpoints
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- with .Values.tls.secretName }}
# the certificate and its key (the workers get only ca.crt)
- name: tls
  secret:
    secretName: {{ . }}
    defaultMode: 256 # 0400; with the pod's fsGroup the kubelet makes it 0440, group 10001: only this pod's user reads it
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- end -}}

{{/* A worker's environment (the chart's part; worker.extraEnv follows it). */}}
{{- define "rowshift.worker.env" -}}
- name: ROWSHIFT_COORDINATOR
  value: {{ .Values.coordinatorURL | default (printf "%s://%s:7070" (ternary "wss" "ws" (not (empty .Values.tls.secretName))) (include "rowshift.coordinator" .)) | quote }}
{{- if and .Values.tls.secretName .Values.tls.caKey }}
- name: ROWSHIFT_TLS_CA
  value: /etc/rowshift-tls/ca.crt
{{- end }}
- name: ROWSHIFT_JOIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rowshift.tokenSecret" . }}
      key: token
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
# the coordinator tells this pod's deletion from an earlier one's of the same name
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: ROWSHIFT_COORDINATOR_GRACE_MS
  value: {{ .Values.coordinatorGraceMs | int64 | quote }}
{{- if ne (int64 .Values.wsHangupSeconds) 600 }}
# the coordinator's --ws-hangup-s: both sides close a silent connection alike
- name: ROWSHIFT_WS_HANGUP_S
  value: {{ .Values.wsHangupSeconds | int64 | quote }}
{{- end }}
# exists exactly while the worker holds a model of the job: the readiness probe's file
- name: ROWSHIFT_READY_FILE
  value: /run/rowshift/ready
{{- if eq (int64 .Values.gpusPerWorker) 0 }}
# CPU workers see no GPU (the CUDA base image's NVIDIA_VISIBLE_DEVICES=all would
# give them every GPU of the node, outside the scheduler's accounting).
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end }}
{{- end -}}

{{- define "rowshift.worker.volumeMounts" -}}
{{ include "rowshift.volumeMounts" . }}
- name: shm
  mountPath: /dev/shm
- name: run
  mountPath: /run/rowshift
{{- if and .Values.tls.secretName .Values.tls.caKey }}
- name: tls-ca
  mountPath: /etc/rowshift-tls
  readOnly: true
{{- end }}
{{- if .Values.checkpoint.existingClaim }}
- name: checkpoints
  mountPath: /checkpoints
{{- end }}
{{- end -}}

{{- define "rowshift.worker.volumes" -}}
{{ include "rowshift.volumes" . }}
# NCCL's shared-memory buffers (the container default /dev/shm is 64 MiB).
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.worker.shmSize | quote }}
# the ready file (ROWSHIFT_READY_FILE; the root filesystem is read-only)
- name: run
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- with .Values.checkpoint.existingClaim }}
- name: checkpoints
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- if and .Values.tls.secretName .Values.tls.caKey }}
# the CA the coordinator's certificate is verified against; never its key
- name: tls-ca
  secret:
    secretName: {{ .Values.tls.caSecretName | default .Values.tls.secretName }}
    items:
      - {key: {{ .Values.tls.caKey }}, path: ca.crt}
{{- end }}
{{- end -}}
