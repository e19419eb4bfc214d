#!/usr/bin/env bash
# Brings up the local control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok with a fleet of fake GPU nodes. Safe to run twice: a healthy running
# cluster is reused. Prints `export KUBECONFIG=...` on its last line.
# The API server presents a client certificate to admission webhooks, as an administrator configures it
# (admission.yaml in the state directory); it is signed by a CA of its own, certs/webhook-client-ca.crt.
#
# Environment (all optional):
#   GLMOPS_CLUSTER         cluster name, one state directory each       (default: glmops)
#   GLMOPS_APISERVER_PORT  kube-apiserver HTTPS port                    (default: 16443)
#   GLMOPS_ETCD_PORT       etcd client port; peer port is this + 1      (default: 12379)
#   GLMOPS_KCM_PORT / GLMOPS_SCHEDULER_PORT / GLMOPS_KWOK_PORT          (20257 / 20259 / 20247)
#   GLMOPS_POD_CIDR        fake pod IPs (loopback: nothing leaves the machine) (default: 127.20.0.0/16)
#   GLMOPS_REAL_NODE       1: also start one real CPU node (cluster/node.sh; needs root) (default: off)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"

state="$(state_dir)"
certs="$state/certs"; logs="$state/logs"; pids="$state/pids"
kubeconfig="$state/kubeconfig"
admission="$state/admission.yaml"

# A cluster started without the real node serves the API on loopback only, where the node's pods cannot reach it.
if [[ "${GLMOPS_REAL_NODE:-}" == 1 ]] && cluster_healthy; then
  # shellcheck source=cluster/node-lib.sh
  source "$here/node-lib.sh"
  if ! apiserver_has_arg "--advertise-address=$(node_net gateway)"; then
    log "cluster '$(cluster_name)' runs without the real node's API address; restarting it"
    "$here/down.sh" >/dev/null
  fi
fi
# An API server started by an earlier version of this script presents no client certificate to admission webhooks.
if cluster_healthy && ! apiserver_has_arg "--admission-control-config-file=$admission"; then
  log "cluster '$(cluster_name)' runs without the webhook client certificate (no --admission-control-config-file); restarting it"
  "$here/down.sh" >/dev/null
fi
if cluster_healthy; then
  "$here/certs.sh" "$certs"  # adds any certificate a newer version of this script needs
  log "cluster '$(cluster_name)' already running (apiserver https://127.0.0.1:$APISERVER_PORT)"
  if [[ "${GLMOPS_REAL_NODE:-}" == 1 ]]; then "$here/node.sh" up; fi
  echo "export KUBECONFIG=$kubeconfig"
  exit 0
fi
if any_recorded_alive; then
  log "cluster '$(cluster_name)' is partly running; stopping its recorded processes first"
  "$here/down.sh" >/dev/null
fi

bin="$("$here/build.sh" | tail -n 1)"
[[ -x "$bin/kube-apiserver" ]] || die "build incomplete: $bin/kube-apiserver missing; run cluster/build.sh and read its errors"
command -v openssl >/dev/null 2>&1 || die "openssl is required to generate the cluster's certificates (apt-get install openssl)"

for port in "$ETCD_PORT" "$((ETCD_PORT + 1))" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT" "$KWOK_PORT"; do
  port_free "$port" || die "port $port on 127.0.0.1 is in use by another process; free it or set the GLMOPS_*_PORT variables (see the top of cluster/up.sh)"
done

mkdir -p "$certs" "$logs" "$pids"
t0=$(date +%s)
"$here/certs.sh" "$certs"
# With the real node the API server also needs a client certificate for the kubelet (logs, exec, port-forward).
kubelet_client=()
apiserver_addr=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1)
if [[ "${GLMOPS_REAL_NODE:-}" == 1 ]]; then
  "$here/certs.sh" "$certs" "$(node_name)"
  kubelet_client=(--kubelet-client-certificate="$certs/apiserver-kubelet-client.crt"
    --kubelet-client-key="$certs/apiserver-kubelet-client.key" --kubelet-preferred-address-types=InternalIP,Hostname)
  # Pods on the real node reach the API server as in a cluster, through the kubernetes Service (10.96.0.1), whose
  # endpoint is the advertise address: the node's bridge IP, which a pod's traffic reaches (127.0.0.1 would be the
  # pod's own loopback). The bridge comes up with the node, after the API server, so it listens on every address.
  # shellcheck source=cluster/node-lib.sh
  source "$here/node-lib.sh"
  apiserver_addr=(--bind-address=0.0.0.0 --advertise-address="$(node_net gateway)")
fi
write_kubeconfig "$kubeconfig" admin
write_admission_config "$admission"
write_kubeconfig "$state/kcm.kubeconfig" kube-controller-manager
write_kubeconfig "$state/scheduler.kubeconfig" kube-scheduler
write_kubeconfig "$state/kwok.kubeconfig" kwok

start_daemon etcd "$bin/etcd" \
  --name=glmops --data-dir="$state/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-advertise-peer-urls="http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster="glmops=http://127.0.0.1:$((ETCD_PORT + 1))" \
  --listen-metrics-urls="" --unsafe-no-fsync=true --quota-backend-bytes=2147483648 --log-level=warn
wait_for "etcd" 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

start_daemon kube-apiserver "$bin/kube-apiserver" \
  "${apiserver_addr[@]}" --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file="$certs/apiserver.crt" --tls-private-key-file="$certs/apiserver.key" \
  --client-ca-file="$certs/ca.crt" \
  --service-account-key-file="$certs/sa.pub" --service-account-signing-key-file="$certs/sa.key" \
  --service-account-issuer="https://kubernetes.default.svc" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --authorization-mode=Node,RBAC --allow-privileged=true \
  --enable-priority-and-fairness=false --profiling=false \
  --admission-control-config-file="$admission" \
  --storage-media-type=application/json "${kubelet_client[@]}"
wait_for "kube-apiserver" 120 curl -fsS --cacert "$certs/ca.crt" --cert "$certs/admin.crt" --key "$certs/admin.key" \
  "https://127.0.0.1:$APISERVER_PORT/readyz"

start_daemon kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig="$state/kcm.kubeconfig" \
  --authentication-kubeconfig="$state/kcm.kubeconfig" --authorization-kubeconfig="$state/kcm.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file="$certs/sa.key" --root-ca-file="$certs/ca.crt" \
  --cluster-signing-cert-file="$certs/ca.crt" --cluster-signing-key-file="$certs/ca.key" \
  --use-service-account-credentials=true --allocate-node-cidrs=false \
  --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' \
  --concurrent-deployment-syncs=10 --concurrent-replicaset-syncs=10 --concurrent-gc-syncs=20
start_daemon kube-scheduler "$bin/kube-scheduler" \
  --kubeconfig="$state/scheduler.kubeconfig" \
  --authentication-kubeconfig="$state/scheduler.kubeconfig" --authorization-kubeconfig="$state/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false
start_daemon kwok "$bin/kwok" \
  --kubeconfig="$state/kwok.kubeconfig" --config="$here/kwok-stages.yaml" \
  --manage-nodes-with-label-selector=glmops.dev/fake-node=true \
  --cidr="$POD_CIDR" --node-ip=127.0.0.1 --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$KWOK_PORT"

kc() { "$bin/kubectl" --kubeconfig="$kubeconfig" "$@"; }
wait_for "kube-controller-manager" 60 curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
wait_for "kube-scheduler" 60 curl -fsSk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
wait_for "default service account" 60 kc get serviceaccount default -n default

fleet="$state/fleet.yaml"
fleet_yaml > "$fleet" || die "could not render the fake GPU fleet (is the Python package installed? run: make venv)"
kc apply -f "$fleet" >/dev/null
want=$(grep -c '^kind: Node' "$fleet")
wait_for "$want fake GPU nodes Ready" 90 nodes_ready "$want"

if [[ "${GLMOPS_REAL_NODE:-}" == 1 ]]; then "$here/node.sh" up; fi
log "cluster '$(cluster_name)' up in $(( $(date +%s) - t0 ))s: $want fake GPU nodes, apiserver https://127.0.0.1:$APISERVER_PORT"
echo "export KUBECONFIG=$kubeconfig"
