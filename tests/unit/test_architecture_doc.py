"""docs/architecture.md stays true: every file its checklists name exists, every layer it lists is a package."""

from __future__ import annotations

import re

from tests.support.cluster import REPO

DOC = (REPO / "docs" / "architecture.md").read_text()


def test_every_path_the_architecture_doc_names_exists() -> None:
    paths = set(re.findall(r"`((?:operator|tests|images|hack|samples|docs)/[^`\s]*)`", DOC))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (REPO / p.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_package_of_the_operator_is_a_layer_of_the_doc() -> None:
    packages = {p.name for p in (REPO / "operator" / "glm_operator").iterdir() if (p / "__init__.py").exists()}
    listed = set(re.findall(r"`glm_operator/(\w+)/`", DOC))
    assert packages == listed, f"undocumented: {sorted(packages - listed)}; gone: {sorted(listed - packages)}"
