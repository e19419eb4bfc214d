"""Builds the glmops vLLM plugin wheel from images/vllm-patches, as the operator image does."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import REPO

PLUGIN_SOURCE = REPO / "images" / "vllm-patches"


def build_plugin_wheel(workdir: Path) -> Path:
    """`pip wheel --no-deps` on a copy of the plugin source (a build in place would litter the tree)."""
    source = workdir / "src"
    shutil.copytree(PLUGIN_SOURCE, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"))
    out = workdir / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(out.glob("*.whl"))
