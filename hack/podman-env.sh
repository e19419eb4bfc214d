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
