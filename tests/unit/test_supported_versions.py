"""The catalog, the plugin and the generated vllm-versions.yaml name the same supported vLLM versions."""

from __future__ import annotations

from pathlib import Path

import yaml
from glmops_vllm_patches.version import PROVEN_VERSIONS, SUPPORTED, Version

from glm_operator.catalog.images import VERSIONS_PATH, load_images

ROOT = Path(__file__).resolve().parents[2]


def test_catalog_versions_are_the_plugins_proven_versions() -> None:
    assert load_images().versions == PROVEN_VERSIONS


def test_generated_versions_file_lists_the_plugins_proven_versions() -> None:
    committed = yaml.safe_load((ROOT / VERSIONS_PATH).read_text())["vllmVersions"]
    assert tuple(committed) == PROVEN_VERSIONS, "run `glmctl generate` after changing PROVEN_VERSIONS"


def test_default_version_is_a_supported_version() -> None:
    images = load_images()
    assert images.default_version in images.versions


def test_every_proven_version_is_in_the_plugins_supported_range() -> None:
    outside = [v for v in PROVEN_VERSIONS if Version.parse(v) not in SUPPORTED]
    assert not outside, f"proven versions outside SUPPORTED {SUPPORTED}: {outside}"
