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

{{- define "rowshift.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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

{{/* The container security context of both pods (non-root uid 10001, nothing writable but the volumes). */}}
{{- define "rowshift.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The pod security context of both pods. */}}
{{- define "rowshift.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
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
