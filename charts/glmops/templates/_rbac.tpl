{{- /*
Rules the operator needs wherever GLMDeployments live: every watched namespace (namespaced mode), or the
whole cluster (watchNamespaces empty). Each rule names the code path that makes the call; docs/rbac.md
lists them with the residual risk.
*/}}
{{- define "glmops.rbac.watchedRules" -}}
# kopf watches GLMDeployments and patches its progress annotations onto them (handlers/glmdeployment.py);
# the canary gate and refresh() read one by name (k8s/objects.py get_glmdeployment).
- apiGroups: [glmops.dev]
  resources: [glmdeployments]
  verbs: [get, list, watch, patch]
# The reconcile's status patch (kopf), the canary reports (k8s/objects.py patch_glmdeployment_status).
- apiGroups: [glmops.dev]
  resources: [glmdeployments/status]
  verbs: [patch]
# Owned objects: server-side applied (patch; create when absent), listed by label and watched for drift
# (k8s/objects.py apply/owned, handlers/glmdeployment.py _owned_event), pruned when unrendered (delete).
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, patch, delete]
# The canary ConfigMap is owned as above; get: spec.canary.gsm8k.source.configMap, a ConfigMap the user
# names in the deployment's namespace (k8s/canary_data.py).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
# spec.modelCache.shared: the claim and the download Job, owned as above (k8s/objects.py apply/owned/delete;
# planner/storage.py). Created once, never read by name (no get); a retained claim is never deleted by glmops.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, create, patch, delete]
# The canary gate follows serving pods: a label-selected kopf watch, one task per pod (handlers/canary.py).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# The readiness-gate condition: read, then strategic-merge patch (k8s/pods.py set_gate/get_gate).
- apiGroups: [""]
  resources: [pods/status]
  verbs: [get, patch]
# kopf posts Events (core v1, create only) on GLMDeployments and serving pods.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
