#!/usr/bin/env bash
# Builds the environment the vLLM patch plugin is proven in, outside git, and prints its python:
#   torch (runs on the CPU here) + the pure-Python packages vLLM's modules import + pytest,
#   pinned in images/vllm-patches/requirements-proof.txt, in $GLMOPS_CACHE/plugin-venv-<hash>;
#   the real vLLM sources of every proven version (hack/vllm-sources.sh).
# Safe to run twice, and concurrently: a venv whose requirements hash is unchanged is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GLMOPS_CACHE:-$HOME/.cache/glmops}"
reqs="$root/images/vllm-patches/requirements-proof.txt"
hash="$(sha1sum "$reqs" | cut -c1-12)"
venv="$cache/plugin-venv-$hash"
mkdir -p "$cache"
# Concurrent runs (two checkouts, a CI beside a developer) wait for each other rather than build one venv twice.
exec 9>"$cache/plugin-env.lock"
flock 9
if [[ ! -f "$venv/.complete" ]]; then
  echo "building the plugin proof environment in $venv (torch and vLLM's Python dependencies; a few minutes)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$reqs"
  touch "$venv/.complete"
  # Older environments of this cache are dead weight (several GB each).
  find "$cache" -maxdepth 1 -name 'plugin-venv-*' ! -name "plugin-venv-$hash" -exec rm -rf {} +
fi
PYTHON="$venv/bin/python" "$root/hack/vllm-sources.sh" >/dev/null
echo "$venv/bin/python"
