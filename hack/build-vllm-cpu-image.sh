#!/usr/bin/env bash
# Builds the CPU vLLM image with the glmops plugin (images/vllm-cpu/Dockerfile) with podman, from the
# environment hack/vllm-cpu-env.sh installs: its site-packages (hard-linked into the build context, not
# downloaded again), the plugin of this checkout and the image's `vllm` launcher (images/vllm-cpu/vllm).
# Saves a docker archive under ~/.cache/glmops/images/ for `podman load` or `ctr -n k8s.io images import`.
# Rebuilds only when the pinned requirements, the plugin's sources, the Dockerfile, the launcher or the base
# changed (label dev.glmops.context-hash).
# Prints image=, archive=, base=, size= lines on stdout. About 6.5 GB of image and as much of archive.
#
# `hack/build-vllm-cpu-image.sh stock` builds the Dockerfile's `stock` target instead: the same vLLM without the
# plugin, laid out as vLLM's stock images (root, pip, a `vllm` distribution record), for the test that lets the
# operator build the plugin onto it. It shares the layers of vLLM with the default image and has no archive
# (archive= is empty): the test pushes it from podman's storage.
set -euo pipefail
target="${1:-plugin}"
[[ $target == plugin || $target == stock ]] || { echo "usage: $0 [stock]" >&2; exit 64; }
source "$(dirname "${BASH_SOURCE[0]}")/podman-env.sh"
glmops_image_deps
REPO=$(cd "$HACK_DIR/.." && pwd)
cd "$REPO"

plugin_python=$("$HACK_DIR/vllm-cpu-env.sh" | tail -1)     # .../vllm-cpu-plugin-<plugin hash>-<venv hash>/bin/python
plugin=$(dirname "$(dirname "$plugin_python")")
venv="${GLMOPS_CACHE:-$HOME/.cache/glmops}/vllm-cpu-venv-${plugin##*-}"
site="$venv/lib/python3.11/site-packages"
[[ -d $site && -d $plugin/site ]] || { echo "no vLLM environment at $site or plugin at $plugin/site" >&2; exit 1; }
vllm_version=$(sed -n 's/^Version: //p' "$site"/vllm_cpu-*.dist-info/METADATA)
plugin_version=$(sed -n 's/^Version: //p' "$plugin"/site/glmops_vllm_patches-*.dist-info/METADATA)
image="localhost/glmops/vllm-cpu:v$vllm_version-glmops-$plugin_version"
[[ $target == plugin ]] || image="localhost/glmops/vllm-cpu:v$vllm_version-stock"

base="${GLMOPS_BASE_IMAGE:-$("$HACK_DIR/base-image.sh")}"
base_id=$(podman image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)
[[ -n $base_id ]] || podman pull "$base" >&2 && base_id=$(podman image inspect --format '{{.Id}}' "$base")
# The environment's directory names are hashes of the pinned requirements and of the plugin's sources.
hash=$({ echo "${venv##*/} ${plugin##*/} $base $base_id $image"; sha256sum images/vllm-cpu/Dockerfile images/vllm-cpu/vllm; } \
  | sha256sum | cut -c1-16)
archive="$GLMOPS_IMAGE_CACHE/vllm-cpu-$vllm_version-$hash.tar"

current=$(podman image inspect --format '{{index .Labels "dev.glmops.context-hash"}}' "$image" 2>/dev/null || true)
[[ $target == plugin ]] || archive=""
if [[ $current == "$hash" && ( -z $archive || -s $archive ) ]]; then
  echo "vLLM CPU image $image is up to date ($hash)" >&2
elif [[ -n $archive && -s $archive ]]; then
  podman load --quiet --input "$archive" >&2
else
  echo "building $image on $base ($hash)" >&2
  # Hard links on the cache's filesystem: a context of several GB without copying it.
  context=$(mktemp -d "$GLMOPS_IMAGE_CACHE/vllm-cpu-context.XXXXXX")
  trap 'rm -rf "$context"' EXIT
  cp -al "$site" "$context/site-packages"
  cp -al "$plugin/site" "$context/plugin"
  install -m 0755 images/vllm-cpu/vllm "$context/vllm"
  stage=() label=vllm-cpu
  [[ $target == plugin ]] || stage=(--target stock) label=vllm-cpu-stock
  podman build --file images/vllm-cpu/Dockerfile --build-arg "BASE_IMAGE=$base" "${stage[@]}" \
    --label "dev.glmops.image=$label" --label "dev.glmops.context-hash=$hash" --tag "$image" "$context" >&2
  [[ -z $archive ]] || glmops_keep_image vllm-cpu "$image" "$archive"
fi
glmops_report_image "$image" "$archive" "$base"
