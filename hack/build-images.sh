#!/usr/bin/env bash
# Builds the operator image with podman as <chart image.repository>:<chart appVersion> and saves it as a
# docker archive under ~/.cache/glmops/images/, which `podman load` and containerd
# (`ctr -n k8s.io images import`) both read. Rebuilds only when the build context, the Dockerfile or the
# base image changed: the image carries the hash of all three in the label dev.glmops.context-hash.
# Prints image=, archive=, base= lines on stdout; progress goes to stderr.
#   GLMOPS_BASE_IMAGE  base image (default: the Debian image hack/base-image.sh builds from the archive)
#   GLMOPS_CA_BUNDLE   CA bundle for pip behind a TLS-intercepting proxy, passed as the build secret "ca"
#                      (default /etc/ssl/certs/ca-certificates.crt when it exists; "" for none)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/podman-env.sh"
glmops_image_deps
REPO=$(cd "$HACK_DIR/.." && pwd)
cd "$REPO"

base="${GLMOPS_BASE_IMAGE:-$("$HACK_DIR/base-image.sh")}"
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/glmops/Chart.yaml)
repository=$(awk '/^image:/ {in_image=1; next} /^[^ #]/ {in_image=0} in_image && $1 == "repository:" {print $2; exit}' \
  charts/glmops/values.yaml)
[[ -n $version && -n $repository ]] || { echo "cannot read appVersion or image.repository from charts/glmops" >&2; exit 1; }
image="$repository:$version"
ca="${GLMOPS_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"

# The build context: exactly the files git tracks or would track under the paths the Dockerfile copies,
# so local build output never reaches the image and the hash covers everything the build reads.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
git ls-files -z --cached --others --exclude-standard -- pyproject.toml README.md operator images/vllm-patches |
  while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$context"
base_id=$(podman image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)
[[ -n $base_id ]] || podman pull "$base" >&2 && base_id=$(podman image inspect --format '{{.Id}}' "$base")
hash=$({ (cd "$context" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
         sha256sum images/operator/Dockerfile; echo "$base $base_id $image"; } | sha256sum | cut -c1-16)
archive="$GLMOPS_IMAGE_CACHE/operator-$version-$hash.tar"

current=$(podman image inspect --format '{{index .Labels "dev.glmops.context-hash"}}' "$image" 2>/dev/null || true)
if [[ $current == "$hash" && -s $archive ]]; then
  echo "operator image $image is up to date ($hash)" >&2
elif [[ -s $archive ]]; then
  echo "loading $archive" >&2
  podman load --quiet --input "$archive" >&2
else
  echo "building $image on $base ($hash)" >&2
  secret=()
  [[ -n $ca && -s $ca ]] && secret=(--secret "id=ca,src=$ca")
  podman build --file images/operator/Dockerfile --build-arg "BASE_IMAGE=$base" "${secret[@]}" \
    --label "dev.glmops.image=operator" --label "dev.glmops.context-hash=$hash" --tag "$image" "$context" >&2
  glmops_keep_image operator "$image" "$archive"
fi
glmops_report_image "$image" "$archive" "$base"
