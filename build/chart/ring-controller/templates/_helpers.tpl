{{/*
Names and labels shared by the templates.

Object names: the release name when it contains "ring-controller" (so
`helm install ring-controller` names everything as build/*.yaml does), else
<release>-ring-controller, or fullnameOverride. The pod label
app.kubernetes.io/name stays "ring-controller" whatever the release: the
PodMonitor's job label and the alert rules (build/monitoring.yaml) select it.
*/}}
{{- define "ring-controller.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of the controller's objects: build/*.yaml's, plus Helm's bookkeeping. */}}
{{- define "ring-controller.labels" -}}
app.kubernetes.io/name: ring-controller
app.kubernetes.io/component: controller
{{ include "ring-controller.helmLabels" . }}
{{- end -}}

{{/* Only on objects, never on pods or selectors (an upgrade must not change those). */}}
{{- define "ring-controller.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The ServiceAccount's username, which the pod-writes policy fences. */}}
{{- define "ring-controller.username" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "ring-controller.fullname" . }}
{{- end -}}

{{/*
RBAC rules on namespaced resources, the same in the ClusterRole (all
namespaces) and in each watched namespace's Role. See build/rbac.yaml for why
each verb is there.
*/}}
{{- define "ring-controller.namespacedRules" -}}
# Member pods: identity, IP, ports, device annotations.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# The epoch annotation on member pods (--touch-pods), fenced by the
# ValidatingAdmissionPolicy <fullname>-pod-writes.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["patch"]
{{- if .clusterWide }}
# Nodes' topology labels and Volcano HyperNodes (topology rank order): read-only.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["topology.volcano.sh"]
  resources: ["hypernodes"]
  verbs: ["get", "list", "watch"]
{{- end }}
# DRA ResourceClaims: the NIC a job's members are reached on
# (ring-controller.io/network-claim): read-only.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["get", "list", "watch"]
# Watched workloads (read-only).
- apiGroups: ["batch.volcano.sh"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"{{ if .clusterWide }}, "clustertrainingruntimes"{{ end }}]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch"]
# PodGroups (Kubernetes 1.37, scheduling.k8s.io/v1beta1): only watched, never read one by one.
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups"]
  verbs: ["list", "watch"]
# The specs it writes. No delete.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# Events on workloads (Normal SpecCompleted, Warnings for bad input).
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* The subject of every binding: the release's ServiceAccount. */}}
{{- define "ring-controller.subjects" -}}
- kind: ServiceAccount
  name: {{ include "ring-controller.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
