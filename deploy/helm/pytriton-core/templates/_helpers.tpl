{{/* Names, labels and the image reference shared by the templates. */}}

{{- define "pytriton-core.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: <release>-<chart> unless the release already names the chart. */}}
{{- define "pytriton-core.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pytriton-core.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pytriton-core.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pytriton-core.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pytriton-core.labels" -}}
helm.sh/chart: {{ include "pytriton-core.chart" . }}
{{ include "pytriton-core.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pytriton-core.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pytriton-core.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pytriton-core.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The name of the ConfigMap holding the model repository (source: configMap). */}}
{{- define "pytriton-core.modelConfigMapName" -}}
{{- printf "%s-models" (include "pytriton-core.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A repository file's ConfigMap key: its path with "/" written as "__". */}}
{{- define "pytriton-core.modelFileKey" -}}
{{- . | replace "/" "__" }}
{{- end }}
