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
{{- define "tritonllm.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
