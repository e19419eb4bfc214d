"""The plugin wheel, loaded by each real vLLM version's own plugin loader, applies what the image promises.

For every proven vLLM version and both platforms: vLLM's `load_general_plugins()` finds the installed wheel's
entry point, each patch logs one line, the applied set is exactly the patch list the operator's image catalog
gives that version and platform, a second registration changes nothing, and VLLM_PLUGINS can leave it out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.plugin.conftest import REPO, RunInVllm
from tests.support.wheel import build_plugin_wheel

CATALOG = yaml.safe_load((REPO / "operator/glm_operator/catalog/data/images.yaml").read_text())


def promised_patches(platform: str, version: str) -> set[str]:
    from glmops_vllm_patches.version import Version, VersionRange

    v = Version.parse(version)
    return {
        name
        for name, rng in CATALOG["patches"].items()
        if platform in rng["platforms"] and v in VersionRange(rng["from"], rng["until"])
    }


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin built as a wheel and installed (--target) the way the image's pip install lays it out."""
    out = tmp_path_factory.mktemp("wheel")
    wheel = build_plugin_wheel(out)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-deps", "--target", str(out / "site"), str(wheel)], check=True)
    return out / "site"


LOAD = """
import logging
# vLLM 0.31+ configures its log handlers when a server process starts, not on import; stand in for that so
# the plugin's lines are seen (in a real server they go out through vLLM's own handler).
_handler = logging.StreamHandler(sys.stderr)
logging.getLogger("vllm.glmops_patches").addHandler(_handler)
logging.getLogger("vllm.glmops_patches").setLevel(logging.INFO)
from vllm.plugins import load_general_plugins
load_general_plugins()
result["loaded_by_vllm"] = "glmops_vllm_patches.plugin" in sys.modules
if not result["loaded_by_vllm"]:
    raise SystemExit(print("@@RESULT@@" + json.dumps(result)))
from glmops_vllm_patches import plugin
first = plugin.outcomes()
plugin.register()
again = plugin.outcomes()
result["applied"] = sorted(n for n, o in first.items() if o.applied)
result["skipped"] = sorted(n for n, o in first.items() if not o.applied)
result["same_after_second_register"] = first == again
result["plugin_file"] = plugin.__file__
"""


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_vllm_loads_the_wheel_and_applies_exactly_the_catalog_patch_list(
    run_in_vllm: RunInVllm, installed_wheel: Path, vllm_version: str, platform: str
) -> None:
    out = run_in_vllm(
        vllm_version,
        LOAD,
        env={"GLMOPS_PATCH_PLATFORM": platform},
        extra_path=[installed_wheel],
        plugin_src=False,
    )
    assert not out.get("error"), out.get("stderr")
    assert out["loaded_by_vllm"]
    assert out["plugin_file"].startswith(str(installed_wheel)), "the wheel, not the source tree, was loaded"
    assert set(out["applied"]) == promised_patches(platform, vllm_version)
    assert out["same_after_second_register"]
    # vLLM's own handler writes to stdout where it is configured on import (0.27.x), ours to stderr.
    lines = [ln for ln in (out["stdout"] + out["stderr"]).splitlines() if "glmops patch " in ln]
    assert len(lines) == 4, "\n".join(lines)
    for name in out["applied"]:
        assert sum(f"glmops patch {name} " in ln and " applied: " in ln for ln in lines) == 1


def test_vllm_plugins_allowlist_without_glmops_loads_nothing(run_in_vllm: RunInVllm, installed_wheel: Path) -> None:
    out = run_in_vllm(
        "0.31.0",
        LOAD,
        env={"GLMOPS_PATCH_PLATFORM": "cuda", "VLLM_PLUGINS": "some_other_plugin"},
        extra_path=[installed_wheel],
        plugin_src=False,
    )
    assert not out.get("error"), out.get("stderr")
    assert out["loaded_by_vllm"] is False
    assert "glmops patch" not in out["stdout"] + out["stderr"]


def test_a_patch_switched_off_by_env_is_skipped_and_says_why(run_in_vllm: RunInVllm, installed_wheel: Path) -> None:
    out = run_in_vllm(
        "0.31.0",
        LOAD,
        env={"GLMOPS_PATCH_PLATFORM": "cuda", "GLMOPS_PATCH_NULL_CONTENT_METRICS": "off"},
        extra_path=[installed_wheel],
        plugin_src=False,
    )
    assert not out.get("error"), out.get("stderr")
    assert "null-content-metrics" in out["skipped"]
    assert "turned off by GLMOPS_PATCH_NULL_CONTENT_METRICS" in out["stdout"] + out["stderr"]
