#!/usr/bin/env bash
# Builds the local control plane's binaries from their Go modules at the pins in
# versions.env, into a cache outside git, and reuses what is already there.
# Usage: cluster/build.sh            (prints the bin directory on its last line)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"

require_go
# The wrapper module's go.mod is the real pin of Kubernetes and etcd; versions.env must agree with it.
require_pin k8s k8s.io/kubernetes "$KUBERNETES_VERSION"
require_pin k8s go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
bin="$(bin_dir)"
mkdir -p "$bin"
start=$(date +%s)
built=()

k8s_ldflags() {
  local v="$KUBERNETES_VERSION" major minor
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  local flags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$flags"
}

build_k8s() {
  local name="$1" pkg="$2"
  [[ -x "$bin/$name" ]] && return 0
  log "building $name ($pkg @ $KUBERNETES_VERSION)"
  (cd "$here/tools/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags)" -o "$bin/$name.tmp" "$pkg") \
    || die "go build of $name failed; see the compiler output above"
  mv "$bin/$name.tmp" "$bin/$name"
  built+=("$name")
}

build_k8s etcd ./cmd/etcd
build_k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build_k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build_k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build_k8s kubectl k8s.io/kubernetes/cmd/kubectl
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
# The real node (cluster/node.sh) runs a kubelet and kube-proxy from the same Kubernetes release.
if [[ "${GLMOPS_REAL_NODE:-}" == 1 ]]; then
  build_k8s kubelet k8s.io/kubernetes/cmd/kubelet
  build_k8s kube-proxy k8s.io/kubernetes/cmd/kube-proxy
  # Its cluster DNS: CoreDNS with the plugins the node uses (cluster/tools/coredns/main.go), kept beside the LWS
  # controller's directory so a change of its pin never rebuilds Kubernetes.
  require_pin coredns github.com/coredns/coredns "$COREDNS_VERSION"
  dns="$(coredns_bin)"
  if [[ ! -x "$dns" ]]; then
    log "building coredns (github.com/coredns/coredns @ $COREDNS_VERSION, the node's plugins)"
    mkdir -p "$(dirname "$dns")"
    (cd "$here/tools/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dns.tmp" .) \
      || die "go build of coredns failed; see the compiler output above"
    mv "$dns.tmp" "$dns"
    built+=(coredns)
  fi
fi

# The LeaderWorkerSet controller, built inside its release module as its Dockerfile builds it (cluster/lws.sh runs it).
lws_bin="$(lws_dir)"
if [[ ! -x "$lws_bin/lws-controller" ]]; then
  log "building lws-controller (sigs.k8s.io/lws/cmd @ $LWS_VERSION)"
  mod="$(lws_module_dir)"
  [[ -d "$mod" ]] || die "could not download sigs.k8s.io/lws@$LWS_VERSION from the Go module proxy"
  mkdir -p "$lws_bin"
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$LWS_VERSION" -o "$lws_bin/lws-controller.tmp" ./cmd) \
    || die "go build of lws-controller failed; see the compiler output above"
  mv "$lws_bin/lws-controller.tmp" "$lws_bin/lws-controller"
  built+=(lws-controller)
fi

if ((${#built[@]})); then
  log "built ${built[*]} in $(( $(date +%s) - start ))s into $bin (lws-controller: $lws_bin)"
else
  log "all binaries cached in $bin"
fi
echo "$bin"
