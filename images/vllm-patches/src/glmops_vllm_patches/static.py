"""Check patch targets against a vLLM source tree without importing it (ast), e.g. an unpacked PyPI wheel.

This is how the plugin is proven against every supported vLLM version on a machine that cannot run them all:
every target a patch needs in that version must exist there, with the parameters the patch relies on.
"""

from __future__ import annotations

import ast
from pathlib import Path

from glmops_vllm_patches.base import Target

_Scope = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def find_problem(root: Path, target: Target) -> str | None:
    """None when `target` exists under `root` (the folder holding the `vllm` package), else what is missing."""
    path = module_file(root, target.module)
    if path is None:
        return f"{target}: module file not found"
    node: _Scope | None = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for part in target.qualname.split("."):
        node = _child(node, part) if node is not None else None
        if node is None:
            return f"{target}: {part!r} not found in {path.name}"
    if target.params:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return f"{target}: not a function"
        names = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        missing = [p for p in target.params if p not in names]
        if missing:
            return f"{target}: parameter(s) {', '.join(missing)} not found"
    return None


def _child(scope: _Scope, name: str) -> _Scope | None:
    """The class or function `name` defined directly in `scope`, or the scope itself for a plain assignment."""
    found: _Scope | None = None
    for stmt in _statements(scope.body):
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            found = stmt  # the last definition wins, as at run time
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and name in _assigned_names(stmt):
            found = found or _Attribute(name)
    return found


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Top-level statements, looking into if/try blocks (platform-conditional definitions are common)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out += _statements(stmt.body) + _statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            out += _statements(stmt.body) + _statements(stmt.orelse) + _statements(stmt.finalbody)
            for handler in stmt.handlers:
                out += _statements(handler.body)
    return out


def _assigned_names(stmt: ast.Assign | ast.AnnAssign) -> set[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return {t.id for t in targets if isinstance(t, ast.Name)} | {
        t.attr for t in targets if isinstance(t, ast.Attribute)
    }


class _Attribute(ast.Module):
    """Marks a name bound by assignment: it exists, but has no body to walk into."""

    def __init__(self, name: str) -> None:
        super().__init__(body=[], type_ignores=[])
        self.name = name
