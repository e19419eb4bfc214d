"""Fixtures for the patch plugin's proof: real vLLM sources per version, and a runner that imports them.

These tests run in the plugin proof environment, not in the operator's venv: the real-vLLM environment's torch (on the
CPU) and vLLM dependencies without its installed vLLM, plus pytest (`hack/vllm-cpu-env.sh proof`, `make plugin-env`).
The vLLM sources come from the PyPI wheels, unpacked by hack/vllm-sources.sh into $GLMOPS_VLLM_SOURCES (default
$GLMOPS_CACHE/vllm-src/<version>, where that script puts them; GLMOPS_CACHE defaults to ~/.cache/glmops).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "images" / "vllm-patches" / "src"
sys.path.insert(0, str(PLUGIN_SRC))

from glmops_vllm_patches.version import PROVEN_VERSIONS  # noqa: E402

CACHE = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops"))
SOURCES = Path(os.environ.get("GLMOPS_VLLM_SOURCES", CACHE / "vllm-src"))


def vllm_source(version: str) -> Path:
    """The folder holding `vllm/` of that version; skips the test (with the fix) when it is not there."""
    root = SOURCES / version
    if not (root / ".complete").is_file():
        pytest.skip(f"vLLM {version} sources not in {SOURCES}: run hack/vllm-sources.sh (or make plugin-env)")
    return root


@pytest.fixture(params=PROVEN_VERSIONS)
def vllm_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


RunInVllm = Callable[..., dict[str, Any]]

# vLLM 0.26.0's CUDA DSA module (vllm.models.deepseek_v32.nvidia.model) builds compile-fusion pattern matchers at
# import from ops of vLLM's compiled extension (vllm/compilation/passes/fusion/matcher_utils.py:32 and the modules it
# imports), which this CPU environment does not have; a GPU build has them. Declaring the op names (no kernel) lets the
# module import so its class can be wrapped and checked; no test calls them. 0.27.1 and later import without them.
COMPILED_OPS_AT_IMPORT = {
    "0.26.0": (
        "rotary_embedding",
        "static_scaled_fp8_quant",
        "dynamic_scaled_fp8_quant",
        "dynamic_per_token_scaled_fp8_quant",
        "silu_and_mul",
        "fused_add_rms_norm",
        "rms_norm_static_fp8_quant",
        "fused_add_rms_norm_static_fp8_quant",
        "rms_norm_dynamic_per_token_quant",
    ),
}


def compiled_op_stubs(version: str) -> str:
    """Code declaring the vLLM compiled ops `version` reads at import, where vllm._C is absent."""
    names = COMPILED_OPS_AT_IMPORT.get(version, ())
    if not names:
        return ""
    # Looked up on disk: importing vllm here would set up its logging before the test code runs.
    return (
        "import glob as _g, os as _os, torch as _t\n"
        "if not any(_g.glob(_os.path.join(_p, 'vllm', '_C*.so')) for _p in sys.path):\n"
        "    _stub_lib = _t.library.Library('_C', 'FRAGMENT')\n"
        f"    for _name in {names!r}:\n"
        "        _stub_lib.define(_name + '(Tensor x) -> ()')\n"
    )


def run_vllm(
    version: str,
    code: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    extra_path: list[Path] | None = None,
    plugin_src: bool = True,
) -> dict[str, Any]:
    """Run `code` in a fresh interpreter that imports the real vLLM `version`; `code` sets `result` (JSON)."""
    root = vllm_source(version)
    path = [root, *(extra_path or []), *([PLUGIN_SRC] if plugin_src else [])]
    script = "import json, sys\nresult = {}\n" + compiled_op_stubs(version) + code
    script += "\nprint('@@RESULT@@' + json.dumps(result))\n"
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in path),
        "VLLM_LOGGING_LEVEL": "INFO",
        **(env or {}),
    }
    proc = subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=timeout)
    marker = [line for line in proc.stdout.splitlines() if line.startswith("@@RESULT@@")]
    if proc.returncode != 0 or not marker:
        return {"error": True, "returncode": proc.returncode, "stderr": proc.stderr[-6000:], "stdout": proc.stdout}
    out: dict[str, Any] = json.loads(marker[-1][len("@@RESULT@@") :])
    out["stderr"] = proc.stderr
    out["stdout"] = proc.stdout
    return out


def run_each_version(code: str) -> dict[str, dict[str, Any]]:
    """`run_vllm(version, code)` for every proven version whose sources are here, side by side (imports are slow)."""
    available = [v for v in PROVEN_VERSIONS if (SOURCES / v / ".complete").is_file()]
    with ThreadPoolExecutor(max_workers=len(available) or 1) as pool:
        return dict(zip(available, pool.map(lambda v: run_vllm(v, code), available), strict=True))


@pytest.fixture
def run_in_vllm() -> RunInVllm:
    """`run_vllm` as a fixture."""
    return run_vllm
