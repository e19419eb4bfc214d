#!/usr/bin/env bash
# Builds the Debian bookworm Python base image from Debian's archive with mmdebstrap (no image registry
# needed), caches its root filesystem under ~/.cache/glmops/images/ and imports it into podman.
# Prints the image's name. Safe to run twice: a cached tarball or an imported image is reused.
#   GLMOPS_DEBIAN_MIRROR    the archive (default http://deb.debian.org/debian)
#   GLMOPS_DEBIAN_SECURITY  its security updates (default http://deb.debian.org/debian-security)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/podman-env.sh"
glmops_image_deps

SUITE=bookworm
MIRROR="${GLMOPS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${GLMOPS_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
# What a Python image needs: the interpreter, venv (the image builds install into one) and the CA roots.
PACKAGES=python3,python3-venv,ca-certificates,tzdata
# Drop documentation and translations, as Debian's own slim images do; copyright files stay.
EXCLUDES=(
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
)
KEY=$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY" "$PACKAGES" "${EXCLUDES[*]}" | sha256sum | cut -c1-12)
IMAGE="localhost/glmops/debian-python:$SUITE-$KEY"
TARBALL="$GLMOPS_IMAGE_CACHE/debian-python-$SUITE-$KEY.tar"

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi
if [[ ! -s $TARBALL ]]; then
  echo "building $TARBALL from $MIRROR with mmdebstrap" >&2
  partial="$TARBALL.partial.$$"
  trap 'rm -f "$partial"' EXIT
  mmdebstrap --quiet --variant=minbase --include="$PACKAGES" "${EXCLUDES[@]}" --format=tar \
    "$SUITE" "$partial" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY $SUITE-security main" >&2
  mv "$partial" "$TARBALL"
fi
podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$TARBALL" "$IMAGE" >/dev/null
echo "$IMAGE"
