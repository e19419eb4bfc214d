# The real node's steps for cluster/node.sh (up and down). Sourced after lib.sh, not run.
# shellcheck shell=bash

NODE_NAME="$(node_name)"
NODE_POD_CIDR="${GLMOPS_NODE_POD_CIDR:-10.244.0.0/24}"
NODE_BRIDGE="${GLMOPS_NODE_BRIDGE:-glmops-br0}"
KUBELET_PORT="${GLMOPS_KUBELET_PORT:-20250}"
KUBELET_HEALTHZ_PORT="${GLMOPS_KUBELET_HEALTHZ_PORT:-20248}"
PROXY_METRICS_PORT="${GLMOPS_PROXY_METRICS_PORT:-20249}"
PROXY_HEALTHZ_PORT="${GLMOPS_PROXY_HEALTHZ_PORT:-20256}"
DNS_READY_PORT="${GLMOPS_DNS_READY_PORT:-20181}"
CLUSTER_DOMAIN=cluster.local
NODE_TAINT_KEY="glmops.dev/real-node"
CNI_BIN_DIR="${GLMOPS_CNI_BIN_DIR:-/usr/lib/cni}"
# The kubelet sets these host-wide kernel settings at start (protectKernelDefaults: false); down puts them back.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables)
# Another cluster's node on this machine would fight over kube-proxy's chains and the kubepods cgroups.
NODE_OWNER_FILE=/run/glmops/real-node.owner

node_dir() { echo "$(state_dir)/node"; }
# containerd's runtime state and socket: short paths on tmpfs-like /run (unix sockets allow 107 bytes).
node_run_dir() { echo "/run/glmops/$(cluster_name)"; }
node_sock() { echo "$(node_run_dir)/containerd.sock"; }
node_ctr() { ctr --address "$(node_sock)" --namespace k8s.io "$@"; }
node_kc() { "$(bin_dir)/kubectl" --kubeconfig="$(state_dir)/kubeconfig" "$@"; }

# node_net FIELD: gateway (the bridge's and node's IP), prefix, or the check of the CIDR against the others.
node_net() {
  python3 - "$1" "$NODE_POD_CIDR" "$POD_CIDR" "$SERVICE_CIDR" <<'PY'
import ipaddress, sys
what, cidr, fake, service = sys.argv[1:]
try:
    net = ipaddress.ip_network(cidr)
except ValueError as err:
    sys.exit(f"GLMOPS_NODE_POD_CIDR: {cidr}: not a network ({err}); give one like 10.244.0.0/24")
if what == "check":
    for name, other in (("GLMOPS_POD_CIDR (kwok's fake pod IPs)", fake), ("GLMOPS_SERVICE_CIDR", service)):
        if net.overlaps(ipaddress.ip_network(other)):
            sys.exit(f"GLMOPS_NODE_POD_CIDR: {cidr}: overlaps {name} {other}; pick a range apart from it")
    if net.version != 4 or net.prefixlen > 28:
        sys.exit(f"GLMOPS_NODE_POD_CIDR: {cidr}: needs an IPv4 range of /28 or wider")
elif what == "gateway":
    print(next(net.hosts()))
else:
    print(net.prefixlen)
PY
}

node_require() {
  [[ $(id -u) -eq 0 ]] || die "the real node needs root (network namespaces, mounts, cgroups, iptables)"
  local cmd missing=()
  for cmd in containerd ctr runc iptables iptables-save conntrack ip findmnt; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" && -x "$CNI_BIN_DIR/loopback" ]] || missing+=("CNI plugins in $CNI_BIN_DIR")
  ((${#missing[@]} == 0)) || die "missing for the real node: ${missing[*]}; run hack/node-deps.sh (or set GLMOPS_CNI_BIN_DIR)"
  ((${#NODE_BRIDGE} <= 15)) || die "GLMOPS_NODE_BRIDGE: $NODE_BRIDGE: Linux interface names have 15 characters at most; pick a shorter one"
  node_net check >/dev/null || exit 1
  [[ -d /sys/fs/cgroup/cpu && -d /sys/fs/cgroup/memory ]] \
    || die "this node setup expects cgroup v1 controllers under /sys/fs/cgroup (cgroupfs driver); found none"
}

# Static Go binaries packed as OCI archives, keyed by their source so an edit rebuilds them.
node_images() {
  local src="$here/tools/node-images" key out
  key="$(cd "$src" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-12)"
  out="$(cache_root)/node-images/$key"
  if [[ ! -f "$out/httpecho.oci.tar" ]]; then
    log "building the node's images (pause, httpecho) into $out"
    mkdir -p "$out"
    local prog
    for prog in pause httpecho; do
      (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$prog" "./$prog") \
        || die "go build of the node image program $prog failed; see the compiler output above"
      python3 "$here/oci_image.py" "$out/$prog" "glmops.local/$prog:$key" "$out/$prog.oci.tar.tmp"
      mv "$out/$prog.oci.tar.tmp" "$out/$prog.oci.tar"
    done
  fi
  cat > "$(node_dir)/images.env" <<EOF
PAUSE_IMAGE=glmops.local/pause:$key
HTTPECHO_IMAGE=glmops.local/httpecho:$key
EOF
  echo "$out"
}

node_claim_host() {
  mkdir -p /run/glmops
  if [[ -f "$NODE_OWNER_FILE" ]]; then
    local owner; owner="$(cat "$NODE_OWNER_FILE")"
    if [[ "$owner" != "$(state_dir)" && -f "$owner/pids/kubelet.pid" ]] && kill -0 "$(cat "$owner/pids/kubelet.pid")" 2>/dev/null; then
      die "another cluster's real node runs on this machine (state $owner); stop it first: GLMOPS_CLUSTER=$(basename "$owner") cluster/node.sh down"
    fi
  fi
  state_dir > "$NODE_OWNER_FILE"
}

node_save_sysctls() {
  local saved; saved="$(node_dir)/sysctl.saved"
  [[ -f "$saved" ]] && return 0
  modprobe br_netfilter 2>/dev/null || true
  local key; for key in "${NODE_SYSCTLS[@]}"; do
    echo "$key=$(sysctl -n "$key")"
  done > "$saved.tmp"
  mv "$saved.tmp" "$saved"
  sysctl -qw net.bridge.bridge-nf-call-iptables=1  # Service traffic between pods on the bridge passes kube-proxy's rules
}

# true when this root lacks CAP_SYS_RESOURCE (bit 24 of the effective capability set).
node_restrict_oom() {
  local eff; eff="$(awk '/^CapEff:/ {print $2}' /proc/self/status)"
  if (( (16#$eff >> 24) & 1 )); then echo false; else echo true; fi
}

node_write_configs() {
  local nd gw; nd="$(node_dir)"; gw="$(node_net gateway)"
  local pause_image; pause_image="$(sed -n 's/^PAUSE_IMAGE=//p' "$nd/images.env")"
  mkdir -p "$nd/cni/net.d" "$nd/cni/ipam" "$nd/kubelet" "$nd/pod-logs" "$nd/volume-plugins" "$(node_run_dir)" \
    "$nd/certs.d"
  cat > "$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd"
state = "$(node_run_dir)/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$(node_sock)"
[ttrpc]
  address = "$(node_sock).ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # Lowering a process' oom_score_adj needs CAP_SYS_RESOURCE, which machines like this one drop even for
  # root; without the clamp runc dies with "failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = $(node_restrict_oom)
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$(node_run_dir)/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$nd/cni/net.d"
  # Per-registry settings (<host>/hosts.toml: a plain-HTTP registry in the cluster, a mirror, an authority), read at
  # each pull, as a node's administrator configures /etc/containerd/certs.d.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$nd/certs.d"
EOF
  # No ipMasq: pods need not leave the machine, and without it the bridge plugin writes no iptables rules.
  cat > "$nd/cni/net.d/10-glmops.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "glmops-$(cluster_name)", "plugins": [
  {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$nd/cni/ipam", "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$gw"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
EOF
  cat > "$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 controllers (a hybrid layout); kubelets from v1.35 refuse v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$(node_sock)
address: $gw
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $(state_dir)/certs/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $nd/pod-logs
volumePluginDir: $nd/volume-plugins
# The kubelet's iptables chains only serve other components; kube-proxy makes its own.
makeIPTablesUtilChains: false
registerWithTaints:
- {key: $NODE_TAINT_KEY, value: "true", effect: NoSchedule}
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
# No image garbage collection: the node's images live on the host's disk beside everything else on this machine,
# whose usage says nothing of the node's. At the default 85 % the kubelet removed the sandbox's pause image
# between two tests, and every pod after that failed to start. The tests remove the images they pull.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 32
# The node's cluster DNS (CoreDNS, below) on the node's own address, as NodeLocal DNSCache puts one on every node:
# pods resolve Services and the per-pod names of headless Services (a LeaderWorkerSet's leader address).
clusterDNS: [$gw]
clusterDomain: $CLUSTER_DOMAIN
EOF
  # Cluster names from the API (read as the user system:coredns, bound to kubeadm's CoreDNS role in node_dns_up);
  # every other name goes to the host's resolver, which pods cannot reach themselves (no masquerading).
  cat > "$nd/Corefile" <<EOF
.:53 {
    bind $gw
    errors
    ready 127.0.0.1:$DNS_READY_PORT
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $(state_dir)/coredns.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
EOF
  cat > "$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $(state_dir)/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $NODE_POD_CIDR
bindAddress: $gw
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: ["$gw/32"]
iptables: {localhostNodePorts: false}
# Zero leaves the host's conntrack settings as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

node_bridge_up() {
  local gw prefix; gw="$(node_net gateway)"; prefix="$(node_net prefix)"
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || ip link add "$NODE_BRIDGE" type bridge
  ip addr replace "$gw/$prefix" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
}

# The node's CoreDNS, bound to the bridge's address before the kubelet starts any pod, with the read-only rights
# kubeadm gives CoreDNS (its ClusterRole system:coredns) bound to the certificate's user.
node_dns_up() {
  node_kc apply -f - >/dev/null <<EOF || die "could not create the ClusterRole and binding of the node's CoreDNS"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
EOF
  start_daemon coredns "$(coredns_bin)" -conf "$(node_dir)/Corefile"
  wait_for "coredns" 60 curl -fsS "http://127.0.0.1:$DNS_READY_PORT/ready"
}

node_ready() {
  [[ "$(node_kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

node_up() {
  node_require
  cluster_healthy || die "cluster '$(cluster_name)' is not running; start it first: cluster/up.sh"
  if pid_alive kubelet && pid_alive kube-proxy && pid_alive containerd && pid_alive coredns && node_ready; then
    log "real node $NODE_NAME already running"
    return 0
  fi
  local d; for d in "${NODE_DAEMONS[@]}"; do
    if pid_alive "$d"; then log "real node partly running; stopping it first"; node_down; break; fi
  done
  local port; for port in "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT" "$PROXY_METRICS_PORT" "$PROXY_HEALTHZ_PORT" "$DNS_READY_PORT"; do
    port_free "$port" || die "port $port on 127.0.0.1 is in use; set GLMOPS_KUBELET_PORT, GLMOPS_KUBELET_HEALTHZ_PORT, GLMOPS_PROXY_METRICS_PORT, GLMOPS_PROXY_HEALTHZ_PORT or GLMOPS_DNS_READY_PORT (see cluster/node.sh)"
  done
  local bin nd s t0 images; nd="$(node_dir)"; s="$(state_dir)"
  bin="$(GLMOPS_REAL_NODE=1 "$here/build.sh" | tail -n 1)"
  mkdir -p "$nd" "$s/logs" "$s/pids"
  images="$(node_images)"
  node_claim_host
  t0=$(date +%s.%N)
  "$here/certs.sh" "$s/certs" "$NODE_NAME"
  write_kubeconfig "$s/node.kubeconfig" "node-$NODE_NAME"
  write_kubeconfig "$s/kube-proxy.kubeconfig" kube-proxy
  write_kubeconfig "$s/coredns.kubeconfig" coredns
  [[ -d /var/log/containers ]] || touch "$nd/made-var-log-containers"
  # containerd 1.6 puts its shims' sockets under /run/containerd/s whatever its state directory.
  [[ -d /run/containerd ]] || touch "$nd/made-run-containerd"
  # The kubelet's device plugin manager listens under a fixed path whatever --root-dir says
  # (DevicePluginPath, k8s.io/kubelet pkg/apis/deviceplugin/v1beta1/constants.go).
  [[ -d /var/lib/kubelet ]] || touch "$nd/made-var-lib-kubelet"
  node_save_sysctls
  node_write_configs
  node_bridge_up
  node_dns_up

  start_daemon containerd "$(command -v containerd)" --config "$nd/containerd.toml" --log-level warn
  wait_for "containerd" 60 node_ctr version
  local prog; for prog in pause httpecho; do
    node_ctr images import "$images/$prog.oci.tar" >/dev/null \
      || die "ctr images import of $images/$prog.oci.tar failed; see $(state_dir)/logs/containerd.log"
  done

  start_daemon kubelet "$bin/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$s/node.kubeconfig" \
    --root-dir="$nd/kubelet" --cert-dir="$nd/kubelet/pki" --hostname-override="$NODE_NAME" \
    --node-ip="$(node_net gateway)" --node-labels="$NODE_TAINT_KEY=true"
  wait_for "kubelet" 120 node_ready
  start_daemon kube-proxy "$bin/kube-proxy" --config="$nd/kube-proxy.yaml"
  wait_for "kube-proxy" 60 curl -fsS "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
  log "real node $NODE_NAME Ready in $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")s (pods on $NODE_POD_CIDR, bridge $NODE_BRIDGE)"
}

# While the API server and kubelet still run, let the kubelet tear its pods down the normal way
# (containers stopped, CNI DEL, volumes unmounted), then take the Node object away.
node_drain() {
  cluster_healthy && pid_alive kubelet || return 0
  node_kc delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" --grace-period=1 --wait=false >/dev/null 2>&1 || true
  local deadline=$(( $(date +%s) + 60 ))
  while (( $(date +%s) < deadline )); do
    [[ -z "$(node_kc get pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" -o name 2>/dev/null)" ]] \
      && [[ -z "$(node_ctr tasks ls -q 2>/dev/null)" ]] && break
    sleep 0.5
  done
  node_kc delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true
}

# Whatever the kubelet could not tear down (it was gone, or the API server was): kill the containers
# through containerd so their shims exit, and drop containerd's record of them.
node_kill_tasks() {
  pid_alive containerd || return 0
  local id
  for id in $(node_ctr tasks ls -q 2>/dev/null); do
    node_ctr tasks kill --signal SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $(node_ctr tasks ls -q 2>/dev/null); do
    for _ in $(seq 1 20); do node_ctr tasks delete "$id" >/dev/null 2>&1 && break; sleep 0.25; done
  done
  for id in $(node_ctr containers ls -q 2>/dev/null); do node_ctr containers delete "$id" >/dev/null 2>&1 || true; done
}

# Mounts under the node's directories (container root filesystems, sandbox /dev/shm, projected volumes).
node_mounts() {
  findmnt -rn -o TARGET | awk -v a="$(node_dir)/" -v b="$(node_run_dir)/" 'index($0, a) == 1 || index($0, b) == 1' | sort -r
}

# Network namespaces holding an address of this node's pod range (left when CNI DEL never ran).
node_netns() {
  local ns; for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    ip -n "$ns" -4 -o addr show 2>/dev/null | awk '{print $4}' | python3 -c "
import ipaddress, sys
net = ipaddress.ip_network(sys.argv[1])
sys.exit(0 if any(ipaddress.ip_interface(a.strip()).ip in net for a in sys.stdin if a.strip()) else 1)" "$NODE_POD_CIDR" \
      && echo "$ns"
  done
  return 0
}

# node_drop_chain IPTABLES TABLE CHAIN: remove the jumps to CHAIN, then CHAIN itself.
node_drop_chain() {
  local ipt="$1" table="$2" chain="$3" rule
  "$ipt" -t "$table" -S "$chain" >/dev/null 2>&1 || return 0
  while read -r rule; do
    [[ -n "$rule" ]] && eval "\"\$ipt\" -t \"\$table\" -D ${rule#-A }" 2>/dev/null || true
  done < <("$ipt" -t "$table" -S | grep -E -- "^-A .* -j $chain( |\$)")
  "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
  "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
}

node_cleanup_host() {
  local m ns link ipt table
  # kube-proxy --cleanup leaves, by design, its copy of the kubelet's KUBE-FIREWALL chain; the canaries
  # stay when a daemon was killed before it could clean up.
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null 2>&1 || continue
    node_drop_chain "$ipt" filter KUBE-FIREWALL
    for table in mangle nat filter; do
      node_drop_chain "$ipt" "$table" KUBE-PROXY-CANARY
      node_drop_chain "$ipt" "$table" KUBE-KUBELET-CANARY
    done
  done
  while read -r m; do [[ -n "$m" ]] && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }; done < <(node_mounts)
  for ns in $(node_netns); do ip netns delete "$ns" 2>/dev/null || true; done
  if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    for link in $(ip -o link show master "$NODE_BRIDGE" | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link delete "$link" 2>/dev/null || true
    done
    ip link delete "$NODE_BRIDGE" 2>/dev/null || true
  fi
  # kubepods (and its QoS children) in every v1 controller, deepest first; only empty ones can go.
  local c; for c in /sys/fs/cgroup/*/kubepods; do
    [[ -d "$c" ]] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  local saved; saved="$(node_dir)/sysctl.saved"
  if [[ -f "$saved" ]]; then
    local line; while read -r line; do sysctl -qw "$line" 2>/dev/null || true; done < "$saved"
    rm -f "$saved"
  fi
  # The kubelet links each container's log here (a fixed path) and unlinks it only when it removes the container.
  local link_path; for link_path in /var/log/containers/*.log; do
    [[ -L "$link_path" && "$(readlink "$link_path")" == "$(node_dir)/"* ]] && rm -f "$link_path"
  done
  if [[ -f "$(node_dir)/made-var-log-containers" ]]; then
    rmdir /var/log/containers 2>/dev/null || true
    rm -f "$(node_dir)/made-var-log-containers"
  fi
  if [[ -f "$(node_dir)/made-run-containerd" ]]; then
    rmdir /run/containerd/s /run/containerd 2>/dev/null || true
    rm -f "$(node_dir)/made-run-containerd"
  fi
  if [[ -f "$(node_dir)/made-var-lib-kubelet" ]]; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
    rm -f "$(node_dir)/made-var-lib-kubelet"
  fi
  rm -rf "$(node_dir)/cni/ipam" "$(node_run_dir)"
  [[ -f "$NODE_OWNER_FILE" && "$(cat "$NODE_OWNER_FILE")" == "$(state_dir)" ]] && rm -f "$NODE_OWNER_FILE"
  rmdir /run/glmops 2>/dev/null || true  # only when no other cluster's node keeps its run directory there
  return 0
}

node_down() {
  [[ -d "$(node_dir)" ]] || return 0
  node_drain
  stop_recorded kube-proxy
  if [[ -f "$(node_dir)/kube-proxy.yaml" ]]; then
    "$(bin_dir)/kube-proxy" --cleanup --config="$(node_dir)/kube-proxy.yaml" >"$(state_dir)/logs/kube-proxy-cleanup.log" 2>&1 \
      || log "kube-proxy --cleanup failed; see $(state_dir)/logs/kube-proxy-cleanup.log"
  fi
  stop_recorded kubelet
  node_kill_tasks
  stop_recorded containerd
  stop_recorded coredns
  node_cleanup_host
  log "real node $NODE_NAME stopped and its mounts, network and rules removed"
}
