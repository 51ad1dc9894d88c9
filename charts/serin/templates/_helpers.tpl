{{/* The release's objects are named after the release, or "serin" when the release is called that. */}}
{{- define "serin.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "serin.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "serin.labels" -}}
{{ include "serin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "serin.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "serin.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the event webhook URL: the one named in eventWebhookSecret, or the chart's own. */}}
{{- define "serin.eventWebhookSecret" -}}
{{- default (printf "%s-event-webhook" (include "serin.fullname" .)) .Values.eventWebhookSecret.name -}}
{{- end -}}

{{/* The dashboard's objects: <fullname>-dashboard, the full name cut so the suffix always fits in 63. */}}
{{- define "serin.dashboardName" -}}
{{- printf "%s-dashboard" (include "serin.fullname" . | trunc 53 | trimSuffix "-") -}}
{{- end -}}

{{/*
The dashboard's pods and objects have a name label of their own: with the operator's name and
instance they would be matched by the operator's Deployment selector, Service, PodDisruptionBudget
and monitors (which select on serin.selectorLabels and cannot change on an installed release).
*/}}
{{- define "serin.dashboardSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-dashboard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: dashboard
{{- end -}}

{{- define "serin.dashboardLabels" -}}
{{ include "serin.dashboardSelectorLabels" . }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
