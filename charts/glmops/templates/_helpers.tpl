{{- define "glmops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "glmops.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "glmops.labels" -}}
app.kubernetes.io/name: {{ include "glmops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "glmops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "glmops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator image: repository@digest when a digest is set (the tag is then ignored), else repository:tag. */}}
{{- define "glmops.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%v" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of a pod spec: global.imagePullSecrets, then the chart's own, each name once. */}}
{{- define "glmops.imagePullSecrets" -}}
{{- $names := list -}}
{{- range concat (((.Values.global).imagePullSecrets) | default list) (.Values.imagePullSecrets | default list) -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- with ($names | uniq) }}
imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The job label of the operator's metrics: one per release, so one release's healthy operator never hides
another's being down. The default release name, glmops, gives glmops-operator. */}}
{{- define "glmops.operatorJob" -}}
{{- printf "%s-operator" (include "glmops.fullname" .) -}}
{{- end -}}

{{- define "glmops.vllmJob" -}}
{{- printf "%s-vllm" (include "glmops.fullname" .) -}}
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
