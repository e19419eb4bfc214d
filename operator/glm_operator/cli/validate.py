"""`glmctl validate`: the admission rules and policy, offline, for CI and GitOps."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from glm_operator.api import API_VERSION, KIND
from glm_operator.catalog.bundle import CatalogError, Catalogs
from glm_operator.rules.engine import admit

EXIT_ADMITTED, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2


class InputError(Exception):
    """Input that cannot be judged at all: unreadable, not YAML, or not a GLMDeployment."""


def load_documents(paths: list[str], stdin: TextIO) -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        try:
            text = stdin.read() if path == "-" else Path(path).read_text()
            loaded = [d for d in yaml.safe_load_all(text) if d is not None]
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: cannot read: {err}") from err
        except yaml.YAMLError as err:
            raise InputError(f"{path}: not valid YAML: {err}") from err
        for i, doc in enumerate(loaded):
            where = f"{path}#{i}" if len(loaded) > 1 else path
            if not isinstance(doc, dict):
                raise InputError(f"{where}: not a Kubernetes object")
            if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
                raise InputError(
                    f"{where}: kind {doc.get('kind')!r} ({doc.get('apiVersion')!r}) is not {KIND} ({API_VERSION})"
                )
            docs.append((where, doc))
    return docs


def load_catalogs(extensions: list[str]) -> Catalogs:
    catalogs = Catalogs.packaged()
    for path in extensions:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise InputError(f"{path}: cannot read: {err}") from err
        try:
            catalogs = catalogs.extend(text, source=path)
        except CatalogError as err:
            raise InputError(str(err)) from err
    return catalogs


def read_inputs(
    paths: list[str], catalog_files: list[str] | None, stdin: TextIO | None
) -> tuple[Catalogs, list[tuple[str, dict[str, Any]]]] | None:
    """Catalogs and manifests for a command, or None after saying on stderr why they cannot be read."""
    try:
        return load_catalogs(catalog_files or []), load_documents(paths, stdin or sys.stdin)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def validate(
    paths: list[str],
    output: str,
    catalog_files: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    stdout = stdout or sys.stdout
    inputs = read_inputs(paths, catalog_files, stdin)
    if inputs is None:
        return EXIT_BAD_INPUT
    catalogs, docs = inputs
    results = []
    for where, doc in docs:
        admission = admit(doc, catalogs)
        results.append(
            {
                "kind": KIND,
                "name": (doc.get("metadata") or {}).get("name", ""),
                "source": where,
                "allowed": admission.allowed,
                "findings": [f.as_dict() for f in admission.findings],
                "patched": admission.patched,
            }
        )
    if output == "json":
        json.dump(results, stdout, indent=2)
        stdout.write("\n")
    else:
        for r in results:
            verdict = "admitted" if r["allowed"] else "REFUSED"
            stdout.write(f"{r['source']}: {r['name']}: {verdict}\n")
            for f in r["findings"]:
                stdout.write(f"  {f['severity']}: {f['message']}\n")
    return EXIT_ADMITTED if all(r["allowed"] for r in results) else EXIT_REFUSED
