"""One vLLM subprocess per version, shared by the test modules that register a check with it.

Importing a vLLM version costs about 15 s of CPU; the rocm-mla-bf16-bmm and null-content-metrics checks need the
same versions, so each version is imported once and every registered check runs in it, each in its own namespace
(a check sets `result`, as with `run_in_vllm`), one failing check leaving the others' results intact. All versions
start together on first use.
"""

from __future__ import annotations

import tempfile
import textwrap
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from glmops_vllm_patches.version import PROVEN_VERSIONS

_checks: dict[str, str] = {}
_runs: dict[str, Future[dict[str, Any]]] = {}

_RUNNER = """
import traceback
from glmops_vllm_patches import plugin
for _name, _code in CHECKS.items():
    plugin.forget()
    _ns = {"result": {}}
    try:
        exec(compile(_code, "<check " + _name + ">", "exec"), _ns)
        result[_name] = _ns["result"]
    except BaseException:
        result[_name] = {"error": True, "stderr": traceback.format_exc()}
"""


def register(name: str, code: str) -> None:
    """Add a check (done at import, before any test runs, so one subprocess per version serves every module)."""
    _checks[name] = textwrap.dedent(code)


def result(run_in_vllm: Any, name: str, version: str) -> dict[str, Any]:
    if not _runs:
        script = f"CHECKS = {_checks!r}\n" + _RUNNER
        # Multiprocess mode must be on before prometheus_client is imported, as in vLLM's API server processes.
        pool = ThreadPoolExecutor(len(PROVEN_VERSIONS))
        for v in PROVEN_VERSIONS:
            env = {"PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="glmops-prom-")}
            _runs[v] = pool.submit(run_in_vllm, v, script, env)
        pool.shutdown(wait=False)
    out = _runs[version].result()
    assert not out.get("error"), out.get("stderr")
    check: dict[str, Any] = out[name]
    assert not check.get("error"), check.get("stderr")
    return check
