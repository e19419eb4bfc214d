"""`glmctl render`: the objects the operator would apply, offline, for review and GitOps."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from glm_operator.api import GLMDeployment
from glm_operator.catalog.bundle import Catalogs
from glm_operator.cli.output import ObjectStream
from glm_operator.cli.validate import EXIT_BAD_INPUT, EXIT_REFUSED, read_inputs
from glm_operator.planner.storage import storage_plan
from glm_operator.render.plan import build_plan
from glm_operator.render.storage import DownloadSettings
from glm_operator.render.workloads import render_objects
from glm_operator.rules.engine import admit
from glm_operator.rules.findings import clip

DEFAULT_NAMESPACE = "default"
"""The namespace of a manifest without one when no `-n` is given (kubectl's, without a kubeconfig)."""


def render(
    paths: list[str],
    lws: bool,
    catalog_files: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    image_policy_file: str | None = None,
    *,
    recursive: bool = False,
    output: str = "yaml",
    namespace: str | None = None,
    access_policy_file: str | None = None,
) -> int:
    stdout = stdout or sys.stdout
    inputs = read_inputs(paths, catalog_files, stdin, image_policy_file, recursive, access_policy_file)
    if inputs is None:
        return EXIT_BAD_INPUT
    catalogs, docs = inputs
    mismatches = [problem for where, doc in docs if (problem := place_in_namespace(where, doc, namespace))]
    for problem in mismatches:
        print(f"error: {problem}", file=sys.stderr)
    if mismatches:
        return EXIT_BAD_INPUT
    # Every manifest is admitted before anything is printed: a refusal leaves no partial output behind.
    admitted: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for where, doc in docs:
        admission = admit(doc, catalogs)
        if not admission.allowed:
            print(f"{where}: refused by admission:\n{admission.rejection()}", file=sys.stderr)
            return EXIT_REFUSED
        admitted.append((doc, admission.patched))
    # Then each one's objects are written as soon as they are rendered, and flushed: a reader sees the first
    # GLMDeployment's objects without waiting for the last, and one who leaves (| head) stops glmctl there.
    with ObjectStream(output, stdout) as stream:
        for doc, patched in admitted:
            for obj in objects_of(doc, patched, catalogs, lws):
                stream.write(obj)
            stream.flush()
    return 0


def place_in_namespace(where: str, doc: dict[str, Any], namespace: str | None) -> str | None:
    """Give a manifest without a namespace the one asked for; why not, when it names another (as kubectl says)."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        return None  # admission names what is wrong with it
    own = metadata.get("namespace")
    if own is None or own == "":
        metadata["namespace"] = namespace or DEFAULT_NAMESPACE
        return None
    if namespace is None or own == namespace or not isinstance(own, str):
        return None  # a namespace that is not a string is admission's to refuse, with its value cut short
    own = clip(own)
    return (
        f'{where}: the namespace from the provided object "{own}" does not match the namespace "{namespace}". '
        f"You must pass '--namespace={own}' to perform this operation, or remove metadata.namespace from the file"
    )


def render_one(doc: dict[str, Any], catalogs: Catalogs, lws: bool) -> list[dict[str, Any]] | str:
    """The objects for one admitted manifest, or admission's rejection."""
    admission = admit(doc, catalogs)
    if not admission.allowed:
        return admission.rejection()
    return objects_of(doc, admission.patched, catalogs, lws)


def objects_of(doc: dict[str, Any], patched: dict[str, Any], catalogs: Catalogs, lws: bool) -> list[dict[str, Any]]:
    """The objects the operator applies for a manifest admission let through (`patched`: with its repairs)."""
    glmd = GLMDeployment.model_validate(patched)
    plan = build_plan(glmd, catalogs)
    owner = {
        "apiVersion": glmd.api_version,
        "kind": glmd.kind,
        "name": plan.name,
        "uid": doc["metadata"].get("uid", "<uid of the GLMDeployment>"),
    }
    # The shared cache's claim and download Job come first: the operator applies the workload once it succeeded.
    objects = list(storage_plan(plan, glmd, owner, (), DownloadSettings()).objects)
    return objects + render_objects(plan, glmd, owner, lws_available=lws)
