"""Differential: every spelling of a managed knob in spec.engine.extraArgs that real vLLM's own argument parser
turns into a changed knob is refused by glmops at admission (tests/realvllm/parse_extra_args.py runs the parser).

No server: only vLLM's EngineArgs.add_cli_args, FlexibleArgumentParser and EngineArgs.from_cli_args, in the
real-vLLM CPU environment (hack/vllm-cpu-env.sh). Skips when that environment is not built.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import evaluate
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import REPO

CATALOGS = Catalogs.packaged()
CACHE = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops"))
REFUSING = ("feasibility/extra-args", "startup/extra-args-json")


def _python() -> Path:
    reqs = (REPO / "hack" / "vllm-cpu-requirements.txt").read_bytes()
    venv = CACHE / f"vllm-cpu-venv-{hashlib.sha1(reqs).hexdigest()[:12]}"  # noqa: S324 - the script's cache key
    if not (venv / ".complete").exists():
        pytest.skip(f"no real-vLLM environment in {venv} (make vllm-cpu-env builds it)")
    return venv / "bin" / "python"


def _flag_spellings(long: str, short: str | None, value: str | None) -> list[list[str]]:
    """--flag v, --flag=v, --flag_name=v, an argparse abbreviation, and the short alias, as vLLM accepts them."""
    names = [long, long.replace("-", "_").replace("__", "--", 1), long[: len(long) - 3]]
    if short:
        names.append(short)
    out = []
    for name in names:
        if value is None:
            out.append([name])
        else:
            out += [[name, value], [f"{name}={value}"]]
    return out


def _json_spellings(long: str, short: str | None, key: str, value: str) -> list[list[str]]:
    """The whole JSON, `=JSON`, and the dotted `--flag.key v` / `--flag.key=v` forms (FlexibleArgumentParser)."""
    blob = json.dumps({key: value})
    out = []
    for name in [long, long.replace("-", "_").replace("__", "--", 1), *([short] if short else [])]:
        out += [[name, blob], [f"{name}={blob}"], [f"{name}.{key}", value], [f"{name}.{key}={value}"]]
    return out


MANAGED = [
    *_flag_spellings("--tensor-parallel-size", "-tp", "2"),
    *_flag_spellings("--pipeline-parallel-size", "-pp", "2"),
    *_flag_spellings("--data-parallel-size", "-dp", "2"),
    *_flag_spellings("--enable-expert-parallel", "-ep", None),
    *_flag_spellings("--all2all-backend", None, "deepep_low_latency"),
    *_flag_spellings("--moe-backend", None, "triton"),
    *_flag_spellings("--attention-backend", None, "FLASHMLA"),
    *_flag_spellings("--kv-cache-dtype", None, "fp8"),
    *_json_spellings("--kernel-config", None, "moe_backend", "triton"),
    *_json_spellings("--attention-config", "-ac", "backend", "FLASHMLA"),
    *_json_spellings("--speculative-config", "-sc", "method", "ngram"),
]
UNMANAGED = [
    ["--max-model-len", "4096"],
    ["--max_num_seqs=8"],
    ["--kernel-config", json.dumps({"enable_flashinfer_autotune": False})],
    ["--kernel-config.enable_flashinfer_autotune=false"],
    ["--compilation-config.mode=0"],
    ["-O0"],
]


def _vllm_parse(python: Path, argvs: list[list[str]]) -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(python), str(Path(__file__).with_name("parse_extra_args.py"))],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=env,
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def _glmops_refuses(extra: list[str]) -> set[str]:
    obj = B().model("zai-org/GLM-5.3").accelerator("H200").tensor(8).set("spec.engine.extraArgs", extra).build()
    return {f.rule for f in evaluate(obj, CATALOGS) if f.severity == "error" and f.rule in REFUSING}


def test_glmops_refuses_every_extra_args_spelling_vllm_reads_as_a_managed_knob() -> None:
    python = _python()
    grid = [*MANAGED, *UNMANAGED, *(a + b for a, b in itertools.combinations(UNMANAGED, 2))]
    baseline, *parsed = _vllm_parse(python, [["--model", "x"], *(["--model", "x", *extra] for extra in grid)])
    sets_knob, missed, over = 0, [], []
    for extra, knobs in zip(grid, parsed, strict=True):
        changed = "error" not in knobs and any(knobs[k] != baseline[k] for k in baseline)
        refused = _glmops_refuses(extra)
        if changed:
            sets_knob += 1
            if not refused:
                missed.append((extra, {k: knobs[k] for k in baseline if knobs[k] != baseline[k]}))
        elif extra in UNMANAGED and refused:
            over.append(extra)
    print(f"grid {len(grid)}: {sets_knob} set a managed knob in vLLM; missed {len(missed)}; over-refused {len(over)}")
    assert not missed, f"vLLM reads these as managed knobs and glmops admits them: {missed}"
    assert not over, f"glmops refuses extraArgs that set no managed knob: {over}"
    assert sets_knob >= len(MANAGED) // 2  # the grid reaches the knobs, not only parse errors
