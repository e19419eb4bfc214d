"""`make release` (hack/release.sh): every artifact of one version, built for real, checksummed and consistent.

Runs after `make images` (the operator image is then reused from its cache, not rebuilt)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, pinned_helm

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def release(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # The tests run in working trees that may hold uncommitted changes; CI's clone holds none.
    full = {**os.environ, "GLMOPS_RELEASE_DIR": str(out), "GLMOPS_RELEASE_ALLOW_DIRTY": "1", **env}
    return subprocess.run(
        [str(REPO / "hack/release.sh")], cwd=REPO, env=full, capture_output=True, text=True, timeout=1200
    )


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not pinned_helm().is_file():
        pytest.skip(f"helm is not built at {pinned_helm()}: run make tools")
    out = tmp_path_factory.mktemp("release") / VERSION
    proc = release(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_every_artifact_is_there_and_its_checksum_holds(released: Path) -> None:
    names = sorted(p.name for p in released.iterdir())
    assert names == sorted(
        [
            f"glmops-{VERSION}.tgz",
            f"glmops-operator-{VERSION}.tar",
            f"glm_operator-{VERSION}-py3-none-any.whl",
            f"glmops_vllm_patches-{VERSION}-py3-none-any.whl",
            "docker-bake.json",
            "crds.yaml",
            "CHANGELOG.md",
            "release.json",
            "SHA256SUMS",
        ]
    )
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=released, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 7, check.stdout + check.stderr


def test_the_chart_package_installs_the_operator_image_of_the_same_version(released: Path) -> None:
    with tarfile.open(released / f"glmops-{VERSION}.tgz") as tgz:
        chart = yaml.safe_load(tgz.extractfile("glmops/Chart.yaml").read())  # type: ignore[union-attr]
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    rendered = subprocess.run(
        [str(pinned_helm()), "template", "glmops", str(released / f"glmops-{VERSION}.tgz"), *TEMPLATE_FLAGS],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    deploy = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    with tarfile.open(released / f"glmops-operator-{VERSION}.tar") as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert [image] == [tag for entry in manifest for tag in entry["RepoTags"]], (image, manifest)
    assert image.endswith(f":{VERSION}")


@pytest.mark.parametrize("dist", ["glm_operator", "glmops_vllm_patches"])
def test_each_wheel_carries_the_release_version(released: Path, dist: str) -> None:
    with zipfile.ZipFile(released / f"{dist}-{VERSION}-py3-none-any.whl") as wheel:
        metadata = wheel.read(f"{dist}-{VERSION}.dist-info/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata


def test_release_json_names_the_commit_the_image_and_every_tag(released: Path) -> None:
    info = json.loads((released / "release.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert info["version"] == VERSION and info["commit"] == head
    assert info["operatorImage"] == f"ghcr.io/glmops/operator:{VERSION}"
    assert f"ghcr.io/glmops/operator:{VERSION}" in info["imageTags"]
    assert any(t.startswith("ghcr.io/glmops/vllm-openai:v") for t in info["imageTags"])
    assert set(info["artifacts"]) == {line.split()[1] for line in (released / "SHA256SUMS").read_text().splitlines()}
    assert (released / "CHANGELOG.md").read_text().startswith(f"## {VERSION}")
    crds = [d for d in yaml.safe_load_all((released / "crds.yaml").read_text()) if d]
    shipped = [d for p in sorted((REPO / "crds").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    assert crds == shipped and {"GLMDeployment", "GLMImage"} <= {d["spec"]["names"]["kind"] for d in crds}


def test_a_version_without_a_changelog_entry_gets_a_draft_and_no_release(tmp_path: Path) -> None:
    if not pinned_helm().is_file():
        pytest.skip(f"helm is not built at {pinned_helm()}: run make tools")
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## 0.0.1\n\n- an old entry\n")
    proc = release(tmp_path / "out", GLMOPS_CHANGELOG=str(changelog))
    assert proc.returncode == 1 and f"has no entry for {VERSION}" in proc.stderr, proc.stderr
    text = changelog.read_text()
    assert text.startswith(f"# Changelog\n\n## {VERSION}\n\n- ") and text.rstrip().endswith("- an old entry")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "change",
    ["untracked", "modified"],
    ids=["an-untracked-file-the-wheel-would-pick-up", "a-modified-tracked-file"],
)
def test_a_tree_that_differs_from_its_commit_is_refused_and_nothing_is_built(tmp_path: Path, change: str) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(REPO), str(clone)], check=True, timeout=120)
    if change == "untracked":
        (clone / "operator" / "glm_operator" / "extra.py").write_text("X = 1\n")
    else:
        with (clone / "README.md").open("a") as readme:
            readme.write("\nedited\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "GLMOPS_RELEASE_ALLOW_DIRTY"}
    proc = subprocess.run(
        [str(clone / "hack/release.sh")], cwd=clone, env={**env, "GLMOPS_RELEASE_DIR": str(out)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the tree differs from commit" in proc.stderr
    assert ("extra.py" if change == "untracked" else "README.md") in proc.stderr
    assert not out.exists()
