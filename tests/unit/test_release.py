"""One version for everything a release ships, and a changelog entry for it (docs/releasing.md)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from glm_operator import __version__
from glm_operator.catalog.images import load_images
from glm_operator.render.dockerfile import PLUGIN_VERSION, render_bake

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART = yaml.safe_load((ROOT / "charts/glmops/Chart.yaml").read_text())


@pytest.mark.parametrize(
    "where, version",
    [
        ("glm_operator.__version__", __version__),
        ("charts/glmops/Chart.yaml version", CHART["version"]),
        ("charts/glmops/Chart.yaml appVersion", CHART["appVersion"]),
        (
            "images/vllm-patches/pyproject.toml",
            tomllib.loads((ROOT / "images/vllm-patches/pyproject.toml").read_text())["project"]["version"],
        ),
        ("the plugin wheel the patched images install", PLUGIN_VERSION),
    ],
)
def test_every_artifact_carries_the_release_version(where: str, version: str) -> None:
    assert str(version) == VERSION, f"{where} is {version}; pyproject.toml says {VERSION} (docs/releasing.md: Bump)"


def test_the_bake_file_tags_the_operator_with_the_release_version() -> None:
    bake = json.loads(render_bake(load_images()))
    assert bake["target"]["operator"]["tags"] == [f"ghcr.io/glmops/operator:{VERSION}"]
    labels = {t["labels"]["dev.glmops.plugin-version"] for n, t in bake["target"].items() if n.startswith("vllm-")}
    assert labels == {VERSION}


def test_the_changelog_has_an_entry_for_the_release_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)}( |$)", text, re.M), f"CHANGELOG.md: add a '## {VERSION}' entry"
