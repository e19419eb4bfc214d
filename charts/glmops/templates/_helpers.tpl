{{- define "glmops.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "glmops.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "glmops.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "glmops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "glmops.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "glmops.webhookService" -}}
{{- printf "%s-webhook" (include "glmops.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Cluster-scoped, so the namespace is in the name: two releases never share a configuration. */}}
{{- define "glmops.webhookConfigName" -}}
{{- printf "%s-%s" (include "glmops.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Not <fullname>-webhook-tls: that was a Helm-owned Secret of earlier versions, deleted by the upgrade. */}}
{{- define "glmops.webhookSecret" -}}
{{- .Values.webhook.certificateSecret | default (printf "%s-webhook-cert" (include "glmops.fullname" .)) -}}
{{- end -}}

{{/* The operator generates and renews the certificate: neither cert-manager nor a Secret of the user's. */}}
{{- define "glmops.webhookCertOwned" -}}
{{- if not (or .Values.webhook.certManager.enabled .Values.webhook.certificateSecret) -}}true{{- end -}}
{{- end -}}

{{/* The operator fills caBundle: unless cert-manager's CA injector does, or values give it. */}}
{{- define "glmops.webhookInjectsCA" -}}
{{- if not (or .Values.webhook.certManager.enabled .Values.webhook.caBundle) -}}true{{- end -}}
{{- end -}}

{{/* The webhook verifies its callers' client certificates against the CA in webhook.clientAuth.caConfigMap. */}}
{{- define "glmops.webhookClientAuth" -}}
{{- if and .Values.webhook.enabled .Values.webhook.clientAuth.caConfigMap.name -}}true{{- end -}}
{{- end -}}
