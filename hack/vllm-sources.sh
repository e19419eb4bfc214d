#!/usr/bin/env bash
# Fetches the real vLLM sources the patch plugin is proven against: each supported version's PyPI wheel,
# unpacked (Python files and metadata only) into $GLMOPS_CACHE/vllm-src/<version>. Nothing goes into git.
# Safe to run twice: a version already unpacked is skipped. Usage: hack/vllm-sources.sh [version...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GLMOPS_CACHE:-$HOME/.cache/glmops}/vllm-src"
py="${PYTHON:-python3}"
versions=("$@")
if ((${#versions[@]} == 0)); then
  # The proven versions are declared once, in the plugin.
  mapfile -t versions < <(PYTHONPATH="$root/images/vllm-patches/src" "$py" -c \
    'from glmops_vllm_patches.version import PROVEN_VERSIONS as v; print("\n".join(v))')
fi
mkdir -p "$cache"
for v in "${versions[@]}"; do
  dest="$cache/$v"
  [[ -f "$dest/.complete" ]] && continue
  tmp="$(mktemp -d "$cache/.dl-$v.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching vllm==$v sources" >&2
  "$py" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "vllm==$v"
  wheel="$(ls "$tmp"/vllm-"$v"-*.whl)"
  "$py" - "$wheel" "$tmp/src" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py") or ".dist-info/" in n]
    z.extractall(dest, names)
PY
  rm -rf "$dest" && mv "$tmp/src" "$dest" && touch "$dest/.complete"
  rm -rf "$tmp"; trap - EXIT
done
echo "$cache"
