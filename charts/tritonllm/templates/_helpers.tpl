{{- define "tritonllm.name" -}}tritonllm{{- end -}}
{{- define "tritonllm.fullname" -}}{{ .Release.Name | trunc 53 | trimSuffix "-" }}-tritonllm{{- end -}}
{{- define "tritonllm.labels" -}}
app.kubernetes.io/name: tritonllm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "tritonllm.selector" -}}
app.kubernetes.io/name: tritonllm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}
{{- define "tritonllm.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "tritonllm.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{- /* repo:tag, or repo@sha256:... when image.digest pins the exact content (the tag then
only documents it: the digest decides what runs). */ -}}
{{- define "tritonllm.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}
{{- /* The operator's rules on namespaced kinds: a Role per watched namespace, or the
ClusterRole when it watches them all. */}}
{{- define "tritonllm.namespacedRules" -}}
# Our kinds: watched; the deployment's finalizer and status, the engine records.
- apiGroups: [tritonllm.io]
  resources: [tritonllmdeployments]
  verbs: [list, watch, patch]
- apiGroups: [tritonllm.io]
  resources: [tritonllmdeployments/status, tritonllmengines/status]
  verbs: [patch]
- apiGroups: [tritonllm.io]
  resources: [tritonllmengines]
  verbs: [list, watch, create, patch, delete]
# Children: server-side apply (patch, and create for a new object), the name check before a
# create (list and watch of every object's metadata: tritonllm.k8s.names; get where that index
# does not know the kind), garbage collection of revisions and switched-off objects (delete).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [patch]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets/scale]
  verbs: [patch]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
# Autoscaling with KEDA, and the Prometheus operator's PodMonitor (each only where installed).
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, list, watch, create, patch, delete]
# The model store: created when spec.storage.create asks, never deleted.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, create, patch]
# Secrets: never listed or watched; the two a deployment names (its token Secret, its MPI key
# Secret) are read by name, and the MPI key Secret is created once. Names are chosen per
# deployment, so resourceNames cannot narrow get (docs/hardening.md).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
# Pods: listed when a Job failed, a Job has no running pod, or a rollout stalls; serving pods
# (label-selected) are watched for containers that exit with an error.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# A verification pod's controller, read by name before the smoke set is sent to that pod: it
# must be the verification workload's ReplicaSet (or leader StatefulSet).
- apiGroups: [apps]
  resources: [replicasets, statefulsets]
  verbs: [get]
# Events: posted on condition flips; a Job with no pod is asked for its FailedCreate Events.
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
{{- end -}}
