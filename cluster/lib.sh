# Shared helpers for the control-plane scripts. Sourced, not run.
# shellcheck shell=bash
here_lib="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/versions.env
source "$here_lib/versions.env"

log() { printf '[glmops-cluster] %s\n' "$*" >&2; }
die() { printf '[glmops-cluster] error: %s\n' "$*" >&2; exit 1; }

cache_root() { echo "${GLMOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/glmops}"; }

# Binaries are keyed by every pin, so a changed pin never reuses an old build.
bin_dir() {
  echo "$(cache_root)/bin/k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
}

# BuildKit and the registry (cluster/build-image-tools.sh), keyed by their own pins only.
image_tools_dir() {
  echo "$(cache_root)/bin/buildkit-${BUILDKIT_VERSION}_registry-${REGISTRY_VERSION}_rootlesskit-${ROOTLESSKIT_VERSION}"
}

# The LeaderWorkerSet controller (cluster/build.sh, cluster/lws.sh), keyed by its own pin, so a new LWS release never
# rebuilds Kubernetes.
lws_dir() { echo "$(cache_root)/bin/lws-${LWS_VERSION}"; }
# The real node's cluster DNS, built from cluster/tools/coredns (cluster/build.sh with GLMOPS_REAL_NODE=1).
coredns_bin() { echo "$(cache_root)/bin/coredns-${COREDNS_VERSION}/coredns"; }

# lws_module_dir: the pinned sigs.k8s.io/lws module in the Go module cache (downloaded if missing). Its config/
# directory is the release's install (CRDs, RBAC, webhooks), read from there at build and install time.
lws_module_dir() {
  # The proxy serves exact versions of sigs.k8s.io/lws but not its version list, so `go install ...@v` fails on its
  # deprecation look-up; downloading the exact version and building inside it works and uses the module's own go.sum.
  (cd / && go mod download -json "sigs.k8s.io/lws@$LWS_VERSION") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# require_pin TOOLS MODULE VERSION: the wrapper module cluster/tools/TOOLS requires MODULE at VERSION, the pin
# versions.env holds (its go.mod is what actually gets built).
require_pin() {
  grep -q "$2 $3\$" "$here_lib/tools/$1/go.mod" \
    || die "cluster/tools/$1/go.mod does not require $2 $3 (versions.env); update both"
}

# go_install NAME MODPATH VERSION: `go install MODPATH@VERSION` into the caller's $bin unless NAME is there; a build
# is added to the caller's `built` list.
go_install() {
  local name="$1" modpath="$2" version="$3"
  [[ -x "$bin/$name" ]] && return 0
  log "building $name ($modpath@$version)"
  local tmp; tmp="$(mktemp -d)"
  CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "$modpath@$version" \
    || { rm -rf "$tmp"; die "go install of $modpath@$version failed; see the compiler output above"; }
  mv "$tmp/$name" "$bin/$name"; rm -rf "$tmp"
  built+=("$name")
}

require_go() {
  command -v go >/dev/null 2>&1 \
    || die "Go is not installed or not on PATH; install Go >= $GO_MIN_VERSION (https://go.dev/doc/install) and re-run"
  local have; have="$(go env GOVERSION)"; have="${have#go}"
  local want_major="${GO_MIN_VERSION%%.*}" want_minor="${GO_MIN_VERSION#*.}"
  local have_major="${have%%.*}" rest="${have#*.}"; local have_minor="${rest%%.*}"
  if (( have_major < want_major || (have_major == want_major && have_minor < want_minor) )); then
    die "Go $have is too old; the pinned modules need Go >= $GO_MIN_VERSION"
  fi
}

cluster_name() { echo "${GLMOPS_CLUSTER:-glmops}"; }
# The real node's name (cluster/node.sh): the kubelet's identity and its client certificate's subject.
node_name() { echo "${GLMOPS_NODE_NAME:-$(cluster_name)-node}"; }
state_dir() { echo "$(cache_root)/clusters/$(cluster_name)"; }
repo_root() { cd "$here_lib/.." && pwd; }

APISERVER_PORT="${GLMOPS_APISERVER_PORT:-16443}"
ETCD_PORT="${GLMOPS_ETCD_PORT:-12379}"
KCM_PORT="${GLMOPS_KCM_PORT:-20257}"
SCHEDULER_PORT="${GLMOPS_SCHEDULER_PORT:-20259}"
KWOK_PORT="${GLMOPS_KWOK_PORT:-20247}"
POD_CIDR="${GLMOPS_POD_CIDR:-127.20.0.0/16}"
SERVICE_CIDR="${GLMOPS_SERVICE_CIDR:-10.96.0.0/16}"
# Started in this order, stopped in reverse.
DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
# Started on demand after the control plane (cluster/lws.sh up), stopped before it; not needed for a healthy cluster.
ADDON_DAEMONS=(lws-controller)
# The LeaderWorkerSet controller serves its webhooks and metrics on this loopback address (ports 443 and 8443, as in
# its pod), and the API server reaches it through an ExternalName Service; one address per cluster.
LWS_ADDR="${GLMOPS_LWS_ADDR:-127.0.45.1}"
# The real node's daemons (cluster/node.sh, GLMOPS_REAL_NODE=1): started after the control plane, stopped before it.
NODE_DAEMONS=(containerd coredns kubelet kube-proxy)

port_free() {
  python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
}

# pid_alive NAME: the recorded process of NAME runs and is still that binary (not a reused pid).
pid_alive() {
  local f; f="$(state_dir)/pids/$1.pid"
  [[ -f "$f" ]] || return 1
  local pid; pid="$(cat "$f")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  # Read the command line whole first: `tr | grep -q` under pipefail fails when grep quits before tr is done.
  local cmd; cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *"/$1 "* ]]
}

# stop_recorded NAME: TERM the recorded process, KILL it after 10s, forget its pid.
stop_recorded() {
  local name="$1" pidfile; pidfile="$(state_dir)/pids/$1.pid"
  [[ -f "$pidfile" ]] || return 0
  if pid_alive "$name"; then
    local pid; pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

# pid_running NAME: the recorded process of NAME still exists (it may not have exec'd its binary yet).
pid_running() {
  local f; f="$(state_dir)/pids/$1.pid"
  [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

any_recorded_alive() {
  local d; for d in "${DAEMONS[@]}"; do pid_alive "$d" && return 0; done; return 1
}

# apiserver_has_arg ARG: the recorded kube-apiserver runs with exactly this argument (flags are read only at start).
apiserver_has_arg() {
  local f args; f="$(state_dir)/pids/kube-apiserver.pid"
  [[ -f "$f" ]] || return 1
  args="$(tr '\0' '\n' < "/proc/$(cat "$f")/cmdline" 2>/dev/null)" || return 1
  grep -qxF -- "$1" <<< "$args"
}

cluster_healthy() {
  local d; for d in "${DAEMONS[@]}"; do pid_alive "$d" || return 1; done
  local c; c="$(state_dir)/certs"
  curl -fsS --max-time 5 --cacert "$c/ca.crt" --cert "$c/admin.crt" --key "$c/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}

start_daemon() {
  local name="$1"; shift
  local s; s="$(state_dir)"
  log "starting $name"
  setsid "$@" >"$s/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$s/pids/$name.pid"
}

is_daemon() { local d; for d in "${DAEMONS[@]}" "${NODE_DAEMONS[@]}" "${ADDON_DAEMONS[@]}"; do [[ "$d" == "$1" ]] && return 0; done; return 1; }

# wait_for WHAT SECONDS CMD...: retry CMD until it succeeds, or fail naming WHAT. When WHAT starts
# with one of our daemons' names, its log is shown and an early exit of that daemon fails at once.
wait_for() {
  local what="$1" secs="$2"; shift 2
  local name="${what%% *}" deadline=$(( $(date +%s) + secs ))
  local logf; logf="$(state_dir)/logs/$name.log"
  until "$@" >/dev/null 2>&1; do
    # Right after start the child may still be between fork and exec: ask whether it exists, not what it runs.
    if is_daemon "$name" && ! pid_running "$name"; then
      log "last lines of $logf:"; tail -n 20 "$logf" >&2
      die "$name exited during start-up"
    fi
    if (( $(date +%s) >= deadline )); then
      is_daemon "$name" && { log "last lines of $logf:"; tail -n 20 "$logf" >&2; }
      die "$what not ready after ${secs}s"
    fi
    sleep 0.5
  done
}

# crd_established KUBECTL CRD: the CRD's Established condition is True. Not `kubectl wait --for=condition=...`:
# just after creation the API server stores the CRD with `status.conditions: null` (the field has no omitempty), and
# kubectl wait fails at once on a null list instead of waiting (seen in CI on a fast machine).
crd_established() {
  [[ "$("$1" get "crd/$2" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]
}

# wait_established KUBECTL SECONDS CRD...: wait for each CRD to be Established, or fail naming it.
wait_established() {
  local kubectl="$1" secs="$2" crd; shift 2
  for crd in "$@"; do wait_for "CRD $crd" "$secs" crd_established "$kubectl" "$crd"; done
}

# write_kubeconfig FILE USER: a kubeconfig for one client certificate of this cluster.
write_kubeconfig() {
  local file="$1" user="$2" c; c="$(state_dir)/certs"
  cat > "$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $(cluster_name)
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $c/ca.crt
users:
- name: $user
  user:
    client-certificate: $c/$user.crt
    client-key: $c/$user.key
contexts:
- name: $(cluster_name)
  context: {cluster: $(cluster_name), user: $user, namespace: default}
current-context: $(cluster_name)
KC
}

# write_admission_config FILE: the API server's admission configuration. The two webhook plugins read a kubeconfig
# whose user "*" (every webhook host) holds the client certificate the API server presents to admission webhooks.
write_admission_config() {
  local file="$1" c; c="$(state_dir)/certs"
  local kubeconfig="${file%.yaml}-webhooks.kubeconfig"
  cat > "$kubeconfig" <<KC
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $c/apiserver-webhook-client.crt
    client-key: $c/apiserver-webhook-client.key
KC
  cat > "$file" <<AC
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $kubeconfig
AC
}

python_bin() {
  local venv; venv="$(repo_root)/.venv/bin/python"
  if [[ -x "$venv" ]]; then echo "$venv"; else echo "${GLMOPS_PYTHON:-python3}"; fi
}

fleet_yaml() {
  PYTHONPATH="$(repo_root)/operator${PYTHONPATH:+:$PYTHONPATH}" "$(python_bin)" -m glm_operator.cli.main fleet
}

nodes_ready() {
  local want="$1" got
  got=$("$(bin_dir)/kubectl" --kubeconfig="$(state_dir)/kubeconfig" get nodes -l glmops.dev/fake-node=true \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$')
  (( got >= want ))
}
