{{/* The release's full name, at most 63 characters. */}}
{{- define "zlink.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "zlink.labels" -}}
app.kubernetes.io/name: zlink-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "zlink.selector" -}}
app.kubernetes.io/name: zlink-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "zlink.serviceAccount" -}}
{{- default (include "zlink.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The namespace the operator watches ("" = all). */}}
{{- define "zlink.watchNamespace" -}}
{{- if kindIs "invalid" .Values.watchNamespace -}}
{{- .Release.Namespace -}}
{{- else -}}
{{- .Values.watchNamespace -}}
{{- end -}}
{{- end -}}

{{- define "zlink.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
