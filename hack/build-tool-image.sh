#!/usr/bin/env bash
# Builds the images of the tools image builds use, with podman, from the binaries cluster/build-image-tools.sh builds
# from their Go modules, on the Debian base of hack/base-image.sh:
#   buildkit (default)  BuildKit's rootless builder image (images/buildkit/Dockerfile), as
#                       docker.io/moby/buildkit:<BUILDKIT_VERSION>-rootless, the image glmops' build Jobs run;
#   registry            the distribution registry (images/registry/Dockerfile), as localhost/glmops/registry:<version>.
# Saves each as a docker archive under ~/.cache/glmops/images/ (which containerd's `ctr images import` reads too).
# Rebuilds only when the binaries, the Dockerfile or the base changed (label dev.glmops.context-hash).
# Prints image=, archive=, base=, size= lines on stdout; progress goes to stderr.
#   GLMOPS_BASE_IMAGE  base image (default: the Debian image hack/base-image.sh builds from the archive)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/podman-env.sh"
glmops_image_deps
REPO=$(cd "$HACK_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=cluster/versions.env
source cluster/versions.env

case "${1:-buildkit}" in
  buildkit) name=buildkit version=$BUILDKIT_VERSION image="docker.io/moby/buildkit:$BUILDKIT_VERSION-rootless"
            files=(buildkitd buildctl rootlesskit buildctl-daemonless.sh) ;;
  registry) name=registry version=$REGISTRY_VERSION image="localhost/glmops/registry:$REGISTRY_VERSION"
            files=(registry) ;;
  *) echo "usage: hack/build-tool-image.sh [buildkit|registry]" >&2; exit 2 ;;
esac
base="${GLMOPS_BASE_IMAGE:-$("$HACK_DIR/base-image.sh")}"
tools=$(cluster/build-image-tools.sh | tail -n 1)
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
for f in "${files[@]}"; do
  [[ -x $tools/$f ]] || { echo "$tools/$f is missing: cluster/build-image-tools.sh did not build it" >&2; exit 1; }
  cp "$tools/$f" "$context/"
done
base_id=$(podman image inspect --format '{{.Id}}' "$base")
dockerfile="images/$name/Dockerfile"
hash=$({ (cd "$context" && sha256sum ./*); sha256sum "$dockerfile"; echo "$base $base_id $image"; } |
  sha256sum | cut -c1-16)
archive="$GLMOPS_IMAGE_CACHE/$name-$version-$hash.tar"

current=$(podman image inspect --format '{{index .Labels "dev.glmops.context-hash"}}' "$image" 2>/dev/null || true)
if [[ $current == "$hash" && -s $archive ]]; then
  echo "image $image is up to date ($hash)" >&2
elif [[ -s $archive ]]; then
  echo "loading $archive" >&2
  podman load --quiet --input "$archive" >&2
else
  echo "building $image on $base ($hash)" >&2
  podman build --file "$dockerfile" --build-arg "BASE_IMAGE=$base" \
    --build-arg "BUILDKIT_VERSION=$BUILDKIT_VERSION" --build-arg "REGISTRY_VERSION=$REGISTRY_VERSION" \
    --label "dev.glmops.image=$name" --label "dev.glmops.context-hash=$hash" --tag "$image" "$context" >&2
  glmops_keep_image "$name" "$image" "$archive"
fi
glmops_report_image "$image" "$archive" "$base"
