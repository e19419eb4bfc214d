"""`glmctl validate`: the admission rules and policy, offline, for CI and GitOps."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO, TypeVar

from glm_operator.api import KIND
from glm_operator.catalog.access_policy import AccessPolicy, AccessPolicyError
from glm_operator.catalog.bundle import CatalogError, Catalogs
from glm_operator.catalog.image_policy import ImagePolicy, PolicyError
from glm_operator.cli.manifests import InputError, Manifests, load_manifests, read_bounded
from glm_operator.cli.output import write_data
from glm_operator.rules.engine import admit
from glm_operator.rules.findings import clip

P = TypeVar("P")
EXIT_ADMITTED, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2
REPORT_FORMATS = ("json", "yaml")
"""Validate's results for machines; `text` (the default) is for people."""
MAX_NOTES = 50
"""Notes printed at most: a directory of a whole application skips many objects, and says how many."""


def load_catalogs(
    extensions: list[str], image_policy_file: str | None = None, access_policy_file: str | None = None
) -> Catalogs:
    catalogs = Catalogs.packaged()
    for path in extensions:
        text = read_bounded(path, sys.stdin)
        try:
            catalogs = catalogs.extend(text, source=path)
        except CatalogError as err:
            raise InputError(str(err)) from err
    if image_policy_file is not None:
        catalogs = replace(catalogs, image_policy=_policy(image_policy_file, ImagePolicy.from_file_text, PolicyError))
    if access_policy_file is not None:
        access = _policy(access_policy_file, AccessPolicy.from_file_text, AccessPolicyError)
        catalogs = replace(catalogs, access_policy=access)
    return catalogs


def _policy(path: str, parse: Callable[[str, str], P], error: type[Exception]) -> P:
    """A cluster policy from a chart values file (`-` is stdin), its error an InputError naming the file."""
    try:
        return parse(read_bounded(path, sys.stdin), path)
    except error as err:
        raise InputError(str(err)) from err


def read_inputs(
    paths: list[str],
    catalog_files: list[str] | None,
    stdin: TextIO | None,
    image_policy_file: str | None = None,
    recursive: bool = False,
    access_policy_file: str | None = None,
) -> tuple[Catalogs, list[tuple[str, dict[str, Any]]]] | None:
    """Catalogs and manifests for a command, or None after saying on stderr why they cannot be read."""
    manifests = Manifests()
    try:
        catalogs = load_catalogs(catalog_files or [], image_policy_file, access_policy_file)
        load_manifests(paths, stdin or sys.stdin, manifests, recursive)
    except InputError as err:
        problem: InputError | None = err
    else:
        problem = None
    for note in manifests.notes[:MAX_NOTES]:
        print(f"note: {note}", file=sys.stderr)
    if len(manifests.notes) > MAX_NOTES:
        print(f"note: ... and {len(manifests.notes) - MAX_NOTES} more notes like these", file=sys.stderr)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return None
    return catalogs, manifests.objects


def validate(
    paths: list[str],
    output: str,
    catalog_files: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    image_policy_file: str | None = None,
    *,
    recursive: bool = False,
    access_policy_file: str | None = None,
) -> int:
    stdout = stdout or sys.stdout
    inputs = read_inputs(paths, catalog_files, stdin, image_policy_file, recursive, access_policy_file)
    if inputs is None:
        return EXIT_BAD_INPUT
    catalogs, docs = inputs
    results = []
    for where, doc in docs:
        admission = admit(doc, catalogs)
        results.append(
            {
                "kind": KIND,
                "name": _name(doc),
                "source": where,
                "allowed": admission.allowed,
                "findings": [f.as_dict() for f in admission.findings],
                "patched": admission.patched,
            }
        )
    if output in REPORT_FORMATS:
        write_data(results, output, stdout)
    else:
        for r in results:
            verdict = "admitted" if r["allowed"] else "REFUSED"
            stdout.write(f"{r['source']}: {clip(str(r['name']))}: {verdict}\n")
            for f in r["findings"]:
                stdout.write(f"  {f['severity']}: {f['message']}\n")
    return EXIT_ADMITTED if all(r["allowed"] for r in results) else EXIT_REFUSED


def _name(doc: dict[str, Any]) -> Any:
    metadata = doc.get("metadata")
    return metadata.get("name", "") if isinstance(metadata, dict) else ""
