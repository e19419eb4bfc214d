"""The layer table in docs/architecture.md is what the import contract enforces and what the code imports."""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "glm_operator"
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _table() -> dict[str, set[str]]:
    """package -> the packages the table says it may import."""
    rows = re.findall(r"^\| [^|]+ \| `glm_operator/(\w+)/` \|[^\n]*\| ([^|\n]+) \|$", _doc(), flags=re.M)
    table = {}
    for package, may in rows:
        listed = re.sub(r"\(.*?\)", "", may).strip()
        table[package] = set() if listed == "nothing of ours" else {n.strip() for n in listed.split(",")}
    return table


def _doc() -> str:
    return (REPO / "docs" / "architecture.md").read_text()


def _layers() -> list[list[str]]:
    """The layers contract, top to bottom, each layer's packages as written."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    section = config["importlinter:contract:layers"]
    return [[p.strip() for p in line.split("|")] for line in section["layers"].split("\n") if line.strip()]


def _imports(package: str) -> set[str]:
    """The other glm_operator packages `package`'s modules import, at any depth of the module."""
    found = set()
    for path in (PACKAGE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] == "glm_operator" and len(parts) > 1 and parts[1] in PACKAGES and parts[1] != package:
                    found.add(parts[1])
    return found


def test_the_table_and_the_contract_name_every_package_once() -> None:
    layered = [p for layer in _layers() for p in layer]
    assert sorted(layered) == PACKAGES
    assert sorted(_table()) == PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_the_table_allows(package: str) -> None:
    extra = _imports(package) - _table()[package]
    assert not extra, f"glm_operator.{package} imports {sorted(extra)}: not in its row of docs/architecture.md"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_table_allows_only_what_the_layers_contract_allows(package: str) -> None:
    layers = _layers()
    level = next(i for i, layer in enumerate(layers) if package in layer)
    below = {p for layer in layers[level + 1 :] for p in layer}
    assert _table()[package] <= below, f"{package}'s row allows {sorted(_table()[package] - below)}, above it"


def test_the_doc_states_the_contract_s_order() -> None:
    order = ", ".join(f"`{' | '.join(layer)}`" for layer in _layers())
    assert order in " ".join(_doc().split()), order
