"""Reading manifest files for `glmctl`, with bounds: hostile input costs little and gets a short answer.

Decisions, as the API server and kubectl would make them:
- A file larger than MAX_INPUT_BYTES is refused unread (the API server refuses request bodies of 3 MiB;
  a bundle of many objects fits well under the cap).
- YAML aliases are accepted, as kubectl accepts them, but a document whose aliases expand it beyond
  MAX_EXPANDED_NODES values or MAX_EXPANDED_BYTES of text is refused before anything walks it (go-yaml,
  which kubectl uses, refuses alias bombs the same way). Recursive aliases are refused.
- Objects of other kinds (a Service, a ConfigMap in the same bundle) are skipped with a note; a file
  without any GLMDeployment is bad input, so a CI gate never passes a file it did not check.
- A file found in a `-f` directory may hold other kinds only (kubectl reads a whole application's
  directory); the directory itself is bad input without any GLMDeployment, as a file is.
- All the files of one run hold at most MAX_TOTAL_BYTES (a directory of many files at the cap of each).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from glm_operator.api import API_VERSION, KIND
from glm_operator.cli.sources import SourceError, expand_sources
from glm_operator.rules.findings import shown_json

MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 4 * MAX_INPUT_BYTES
MAX_EXPANDED_NODES = 100_000
MAX_EXPANDED_BYTES = MAX_INPUT_BYTES
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputError(Exception):
    """Input that cannot be judged at all: unreadable, not YAML, too large, or without a GLMDeployment."""


@dataclass
class Manifests:
    """The GLMDeployments found, each with where it came from, and a note per object skipped."""

    objects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_bounded(path: str, stdin: IO[Any]) -> str:
    """The file's text, refusing more than MAX_INPUT_BYTES without reading further."""
    try:
        if path == "-":
            raw = getattr(stdin, "buffer", stdin).read(MAX_INPUT_BYTES + 1)
            data = raw.encode() if isinstance(raw, str) else raw
        else:
            with Path(path).open("rb") as f:
                data = f.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise InputError(f"{path}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB; refused unread")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from err


def parse_documents(path: str, text: str) -> list[Any]:
    """Every YAML document of one file (empty ones dropped), each checked against the expansion budget."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]  # noqa: S506 (a safe loader)
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {_first_line(str(err))}") from err
    except RecursionError as err:
        raise InputError(f"{path}: not valid YAML: nested too deeply") from err
    for i, doc in enumerate(docs):
        problem = expansion_problem(doc)
        if problem:
            raise InputError(f"{_where(path, i, len(docs))}: {problem}; refused")
    return docs


def expansion_problem(doc: Any) -> str | None:
    """Why a loaded document is too large once its aliases are expanded, or None.

    Aliases share one Python object, so each distinct object is sized once (memoised by identity):
    the cost is that of the text, not of its expansion.
    """
    sizes: dict[int, tuple[int, int]] = {}
    in_progress: set[int] = set()

    def size(node: Any) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if isinstance(node, str | bytes):
            return 1, len(node)
        if not isinstance(node, dict | list):
            return 1, 0
        if key in in_progress:
            raise _Recursive
        in_progress.add(key)
        children: Iterator[Any] = iter(node.items()) if isinstance(node, dict) else iter(node)
        nodes, text = 1, 0
        for child in children:
            for part in child if isinstance(node, dict) else (child,):
                n, t = size(part)
                nodes, text = nodes + n, text + t
            if nodes > MAX_EXPANDED_NODES or text > MAX_EXPANDED_BYTES:
                break
        in_progress.discard(key)
        sizes[key] = nodes, text
        return nodes, text

    try:
        nodes, text = size(doc)
    except _Recursive:
        return "a YAML alias refers to itself (a recursive structure is not a Kubernetes object)"
    except RecursionError:
        return "nested too deeply"
    if nodes > MAX_EXPANDED_NODES:
        return f"its YAML aliases expand it to more than {MAX_EXPANDED_NODES} values"
    if text > MAX_EXPANDED_BYTES:
        return f"its YAML aliases expand it to more than {MAX_EXPANDED_BYTES // (1024 * 1024)} MiB of text"
    return None


class _Recursive(Exception):
    pass


def select_glmdeployments(path: str, docs: list[Any], manifests: Manifests, required: bool = True) -> int:
    """Keep the GLMDeployments of one file (items of a `kind: List` too), noting every other kind skipped.

    Returns how many were kept; without `required` a file without any is noted rather than refused.
    """
    found = 0
    for i, doc in enumerate(docs):
        for where, obj in _entries(_where(path, i, len(docs)), doc):
            if not isinstance(obj, dict):
                raise InputError(f"{where}: not a Kubernetes object (a {type(obj).__name__})")
            kind, api_version = _short(obj.get("kind")), _short(obj.get("apiVersion"))
            if obj.get("kind") == KIND and obj.get("apiVersion") == API_VERSION:
                manifests.objects.append((where, obj))
                found += 1
            elif obj.get("kind") == KIND:
                raise InputError(f"{where}: apiVersion {api_version} of {KIND} is not {API_VERSION}")
            else:
                manifests.notes.append(f"{where}: skipped {kind} ({api_version}): not a {KIND}")
    if not found and required:
        raise InputError(f"no {KIND} in {path}")
    if not docs:
        manifests.notes.append(f"{path}: skipped: no objects in it")
    return found


def _entries(where: str, doc: Any) -> list[tuple[str, Any]]:
    """The objects of one document: itself, or the items of a `kind: List` (as `kubectl get -o yaml` writes)."""
    items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
    if isinstance(items, list) and items:
        return [(f"{where}.items[{j}]", item) for j, item in enumerate(items)]
    return [(where, doc)]


def _short(value: Any) -> str:
    return shown_json(value, 80)


def load_manifests(paths: list[str], stdin: IO[Any], manifests: Manifests, recursive: bool = False) -> None:
    """Fill `manifests` from every file and directory; on bad input, what was noted so far stays in it."""
    try:
        sources = expand_sources(paths, recursive, manifests.notes)
    except SourceError as err:
        raise InputError(str(err)) from err
    found_in: dict[str, int] = {}
    left = MAX_TOTAL_BYTES
    for source in sources:
        text = read_bounded(source.path, stdin)
        left -= len(text)
        if left < 0:
            raise InputError(
                f"{source.path}: the files given hold more than {MAX_TOTAL_BYTES // (1024 * 1024)} MiB in all; "
                "refused (check them in several runs)"
            )
        docs = parse_documents(source.path, text)
        found = select_glmdeployments(source.path, docs, manifests, required=source.directory is None)
        if source.directory is not None:
            found_in[source.directory] = found_in.get(source.directory, 0) + found
    for directory, found in found_in.items():
        if not found:
            raise InputError(f"no {KIND} in any file of {directory}")


def _where(path: str, index: int, count: int) -> str:
    return f"{path}#{index}" if count > 1 else path


def _first_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "... (truncated)"
