{{/* Labels every object carries: previewd's ownership labels from the values. */}}
{{- define "previewd.labels" -}}
{{- range $key, $value := .Values.labels }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}

{{/* The release name is the preview's slug; every object name starts with it. */}}
{{- define "previewd.name" -}}
{{ .Release.Name }}
{{- end }}

{{/* Sync-wave annotation. */}}
{{- define "previewd.wave" -}}
argocd.argoproj.io/sync-wave: {{ . | quote }}
{{- end }}
