#!/usr/bin/env bash
# Builds BuildKit's rootless builder image (images/buildkit/Dockerfile) with podman as
# docker.io/moby/buildkit:<BUILDKIT_VERSION>-rootless, the image glmops' build Jobs run, from the binaries
# cluster/build-image-tools.sh builds from their Go modules, on the Debian base of hack/base-image.sh. Saves it as a
# docker archive under ~/.cache/glmops/images/ (which containerd's `ctr images import` reads too). Rebuilds only
# when the binaries, the Dockerfile or the base changed (label dev.glmops.context-hash).
# Prints image=, archive=, base=, size= lines on stdout; progress goes to stderr.
#   GLMOPS_BASE_IMAGE  base image (default: the Debian image hack/base-image.sh builds from the archive)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/podman-env.sh"
glmops_image_deps
REPO=$(cd "$HACK_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=cluster/versions.env
source cluster/versions.env

base="${GLMOPS_BASE_IMAGE:-$("$HACK_DIR/base-image.sh")}"
tools=$(cluster/build-image-tools.sh | tail -n 1)
image="docker.io/moby/buildkit:$BUILDKIT_VERSION-rootless"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
for f in buildkitd buildctl rootlesskit buildctl-daemonless.sh; do
  [[ -x $tools/$f ]] || { echo "$tools/$f is missing: cluster/build-image-tools.sh did not build it" >&2; exit 1; }
  cp "$tools/$f" "$context/"
done
base_id=$(podman image inspect --format '{{.Id}}' "$base")
hash=$({ (cd "$context" && sha256sum ./*); sha256sum images/buildkit/Dockerfile; echo "$base $base_id $image"; } |
  sha256sum | cut -c1-16)
archive="$GLMOPS_IMAGE_CACHE/buildkit-$BUILDKIT_VERSION-$hash.tar"

current=$(podman image inspect --format '{{index .Labels "dev.glmops.context-hash"}}' "$image" 2>/dev/null || true)
if [[ $current == "$hash" && -s $archive ]]; then
  echo "builder image $image is up to date ($hash)" >&2
elif [[ -s $archive ]]; then
  echo "loading $archive" >&2
  podman load --quiet --input "$archive" >&2
else
  echo "building $image on $base ($hash)" >&2
  podman build --file images/buildkit/Dockerfile --build-arg "BASE_IMAGE=$base" \
    --build-arg "BUILDKIT_VERSION=$BUILDKIT_VERSION" \
    --label "dev.glmops.image=buildkit" --label "dev.glmops.context-hash=$hash" --tag "$image" "$context" >&2
  glmops_keep_image buildkit "$image" "$archive"
fi
glmops_report_image "$image" "$archive" "$base"
