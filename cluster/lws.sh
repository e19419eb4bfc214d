#!/usr/bin/env bash
# The LeaderWorkerSet controller of the pinned release (versions.env LWS_VERSION), installed as its users install it
# (`kubectl kustomize config/default` of its Go module: CRDs, ServiceAccount and RBAC, webhook configurations,
# internal certificate management) and run as a local process, like the control plane's daemons.
#   cluster/lws.sh up      install and start it (after cluster/up.sh); safe to run twice
#   cluster/lws.sh down    stop it and uninstall the release (CRDs, webhooks, RBAC): the cluster is LWS-free again,
#                          as the StatefulSet fallback needs
#   cluster/lws.sh status  exit 0 when it runs and its webhooks answer
# What differs from a pod (see docs/networking.md): the controller runs as a process with the ServiceAccount's token,
# not in a pod; it listens on a loopback address (GLMOPS_LWS_ADDR, default 127.0.45.1) reached through ExternalName
# Services; one replica without leader election.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"

state="$(state_dir)"
dir="$state/lws"
kubeconfig="$state/kubeconfig"
kc() { "$(bin_dir)/kubectl" --kubeconfig="$kubeconfig" "$@"; }
webhooks_answer() {
  # A server-side dry run passes the release's mutating and validating webhooks for LeaderWorkerSets.
  kc create --dry-run=server -f - >/dev/null 2>&1 <<'LWS'
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: glmops-lws-probe, namespace: default}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate: {spec: {containers: [{name: probe, image: probe}]}}
LWS
}

# mount_certs: write the keys of the controller's certificate Secret as files, as a Secret volume would.
mount_certs() {
  local key value
  mkdir -p "$dir/certs"
  for key in tls.crt tls.key ca.crt; do
    value="$(kc get secret lws-webhook-server-cert -n lws-system -o "jsonpath={.data.${key//./\\.}}")"
    [[ -n "$value" ]] || return 1
    base64 -d <<< "$value" > "$dir/certs/$key.tmp" && mv "$dir/certs/$key.tmp" "$dir/certs/$key"
  done
  chmod 600 "$dir/certs/tls.key"
}

up() {
  cluster_healthy || die "cluster '$(cluster_name)' is not running; run cluster/up.sh first"
  if pid_alive lws-controller && webhooks_answer; then
    log "lws-controller $LWS_VERSION already running ($LWS_ADDR)"; return 0
  fi
  stop_recorded lws-controller
  "$here/build.sh" >/dev/null
  local mod; mod="$(lws_module_dir)"
  mkdir -p "$dir"
  kc kustomize "$mod/config/default" 2>/dev/null | "$(python_bin)" "$here/lws_install.py" "$dir" "$mod" "$LWS_ADDR"
  kc apply --server-side --force-conflicts -f "$dir/install.yaml" >/dev/null
  wait_established kc 60 leaderworkersets.leaderworkerset.x-k8s.io disaggregatedsets.disaggregatedset.x-k8s.io
  # Its identity: the release's ServiceAccount, bound to the release's ClusterRole and leader-election Role.
  local token; token="$(kc create token lws-controller-manager -n lws-system --duration=8760h)"
  cat > "$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $(cluster_name)
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: $state/certs/ca.crt}
users:
- name: lws-controller-manager
  user: {token: $token}
contexts:
- name: lws
  context: {cluster: $(cluster_name), user: lws-controller-manager, namespace: lws-system}
current-context: lws
KC
  chmod 600 "$dir/kubeconfig"
  mkdir -p "$state/logs" "$state/pids"
  start_daemon lws-controller "$(lws_dir)/lws-controller" --config="$dir/config.yaml" \
    --kubeconfig="$dir/kubeconfig" --zap-log-level=2
  wait_for "lws-controller health" 60 curl -fsS "http://$LWS_ADDR:8081/readyz"
  # Its cert-controller writes the serving certificate into the Secret lws-webhook-server-cert and waits for the
  # kubelet to mount that Secret into its certificate directory; with no kubelet, this script does the mounting.
  wait_for "lws-controller serving certificate" 60 mount_certs
  wait_for "lws-controller webhooks" 90 webhooks_answer
  log "lws-controller $LWS_VERSION running ($LWS_ADDR); log $state/logs/lws-controller.log"
}

down() {
  stop_recorded lws-controller
  if cluster_healthy && [[ -f "$dir/install.yaml" ]]; then
    # Webhook configurations first: with no controller their failurePolicy Fail would refuse LWS pods.
    kc delete --ignore-not-found --wait=true --timeout=120s -f "$dir/install.yaml" >/dev/null
    log "uninstalled LeaderWorkerSet $LWS_VERSION"
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    if pid_alive lws-controller && webhooks_answer; then echo "lws-controller $LWS_VERSION: running ($LWS_ADDR)"
    else echo "lws-controller: not running"; exit 1; fi ;;
  *) die "usage: cluster/lws.sh up|down|status" ;;
esac
