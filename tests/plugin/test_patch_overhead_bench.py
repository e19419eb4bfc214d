"""bench/patch_overhead.py runs from one command and says what it ran on (here its CPU smoke run, on gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_bench(ranks: int, out: Path) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            str(REPO / "bench" / "patch_overhead.py"),
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(out.read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == result, "what it prints is what it writes"
    return result


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_patch_cost_bench_records_its_device_versions_commit_and_command(ranks: int, tmp_path: Path) -> None:
    result = run_bench(ranks, tmp_path / "out.json")
    assert result["device"] == "cpu" and result["ranks"] == ranks and result["devices"] == 0
    assert str(result["torch"]).split("+")[0].count(".") == 2
    assert len(str(result["commit"])) == 40
    assert result["command"] == f"torchrun --nproc-per-node {ranks} bench/patch_overhead.py"
    (remap,) = result["moe_remap"]  # type: ignore[misc]
    assert remap["remap_s"] > 0 and remap["experts_bf16_s"] > 0
    if ranks == 2:
        (handoff,) = result["handoff"]  # type: ignore[misc]
        assert handoff["tokens"] == 16 and handoff["plain_s"] > 0 and handoff["extra_bytes_over_plain"] > 0
    else:
        assert "two ranks" in result["handoff"]["skipped"]  # type: ignore[index]
