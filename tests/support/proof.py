"""The proof scripts under images/vllm-patches/proof/ are scripts, not a package: tests load them by file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PROOF = Path(__file__).resolve().parents[2] / "images" / "vllm-patches" / "proof"


def load_proof_module(name: str) -> ModuleType:
    """images/vllm-patches/proof/<name>.py as module `name` (registered in sys.modules, as its siblings import it)."""
    spec = importlib.util.spec_from_file_location(name, PROOF / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
