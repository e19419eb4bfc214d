#!/usr/bin/env bash
# Sourced by the image scripts: installs podman and mmdebstrap when missing (Debian/Ubuntu, as
# hack/system-deps.sh does) and points podman at hack/containers.conf. Defines GLMOPS_IMAGE_CACHE.
HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HACK_DIR/apt.sh"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$HACK_DIR/containers.conf}"
GLMOPS_IMAGE_CACHE="${GLMOPS_CACHE:-$HOME/.cache/glmops}/images"
mkdir -p "$GLMOPS_IMAGE_CACHE"

glmops_image_deps() {
  local need=()
  command -v podman >/dev/null 2>&1 || need+=(podman)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
  glmops_apt_install ${need[@]+"${need[@]}"}
}

# glmops_keep_image NAME IMAGE ARCHIVE: save a freshly built image as the cache's archive for NAME, and drop the
# archives and images of NAME's earlier builds (they lost their tag to this one; the layer cache has no label).
glmops_keep_image() {
  local name="$1" image="$2" archive="$3"
  podman save --quiet --format docker-archive --output "$archive.partial" "$image"
  mv "$archive.partial" "$archive"
  find "$GLMOPS_IMAGE_CACHE" -maxdepth 1 -name "$name-*.tar" ! -name "${archive##*/}" -delete
  podman image prune --force --filter "label=dev.glmops.image=$name" >/dev/null
}

# glmops_report_image IMAGE ARCHIVE BASE: the image=, archive=, base=, size= lines the image scripts print.
glmops_report_image() {
  local size; size=$(podman image inspect --format "{{.Size}}" "$1")
  printf 'image=%s\narchive=%s\nbase=%s\nsize=%s\n' "$1" "$2" "$3" "$size"
}
