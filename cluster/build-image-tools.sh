#!/usr/bin/env bash
# Builds what the image-build tests run for real: BuildKit's daemon and client (buildkitd, buildctl) from the wrapper
# module cluster/tools/buildkit with BuildKit's own buildctl-daemonless.sh beside them, rootlesskit (what BuildKit's
# rootless image runs the daemon under), and the distribution project's registry, at the pins in versions.env, into a
# cache directory outside git; reuses what is already there. Not part of the control plane (cluster/build.sh): the demo
# never needs them.
# Usage: cluster/build-image-tools.sh   (prints the bin directory on its last line)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/lib.sh"

require_go
require_pin buildkit github.com/moby/buildkit "$BUILDKIT_VERSION"
bin="$(image_tools_dir)"
mkdir -p "$bin"
start=$(date +%s)
built=()

if [[ ! -x "$bin/buildkitd" || ! -x "$bin/buildctl" ]]; then
  log "building buildkitd and buildctl (github.com/moby/buildkit @ $BUILDKIT_VERSION)"
  tmp="$(mktemp -d)"
  (cd "$here/tools/buildkit" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/" \
    github.com/moby/buildkit/cmd/buildkitd github.com/moby/buildkit/cmd/buildctl) \
    || { rm -rf "$tmp"; die "go build of buildkitd and buildctl failed; see the compiler output above"; }
  mv "$tmp/buildkitd" "$tmp/buildctl" "$bin/"; rm -rf "$tmp"
  built+=(buildkitd buildctl)
fi
if [[ ! -x "$bin/buildctl-daemonless.sh" ]]; then
  # The script BuildKit's rootless image carries, from the pinned module (examples/buildctl-daemonless).
  dir="$(cd "$here/tools/buildkit" && go list -m -f '{{.Dir}}' github.com/moby/buildkit)" \
    || die "go list of github.com/moby/buildkit failed in cluster/tools/buildkit"
  install -m 0755 "$dir/examples/buildctl-daemonless/buildctl-daemonless.sh" "$bin/buildctl-daemonless.sh"
fi
go_install registry github.com/distribution/distribution/v3/cmd/registry "$REGISTRY_VERSION"
go_install rootlesskit github.com/rootless-containers/rootlesskit/v3/cmd/rootlesskit "$ROOTLESSKIT_VERSION"

if ((${#built[@]})); then
  log "built ${built[*]} in $(( $(date +%s) - start ))s into $bin"
else
  log "image build tools cached in $bin"
fi
echo "$bin"
