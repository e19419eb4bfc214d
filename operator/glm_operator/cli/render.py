"""`glmctl render`: the objects the operator would apply, offline, for review and GitOps."""

from __future__ import annotations

import sys
from typing import Any, TextIO

import yaml

from glm_operator.api import GLMDeployment
from glm_operator.cli.validate import EXIT_BAD_INPUT, EXIT_REFUSED, read_inputs
from glm_operator.planner.storage import storage_plan
from glm_operator.render.plan import build_plan
from glm_operator.render.storage import DownloadSettings
from glm_operator.render.workloads import render_objects
from glm_operator.rules.engine import admit


def render(
    paths: list[str],
    lws: bool,
    catalog_files: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    image_policy_file: str | None = None,
    *,
    recursive: bool = False,
) -> int:
    stdout = stdout or sys.stdout
    inputs = read_inputs(paths, catalog_files, stdin, image_policy_file, recursive)
    if inputs is None:
        return EXIT_BAD_INPUT
    catalogs, docs = inputs
    rendered: list[dict[str, Any]] = []
    for where, doc in docs:
        if isinstance(doc.get("metadata"), dict):
            doc["metadata"].setdefault("namespace", "default")
        admission = admit(doc, catalogs)
        if not admission.allowed:
            print(f"{where}: refused by admission:\n{admission.rejection()}", file=sys.stderr)
            return EXIT_REFUSED
        glmd = GLMDeployment.model_validate(admission.patched)
        plan = build_plan(glmd, catalogs)
        owner = {
            "apiVersion": glmd.api_version,
            "kind": glmd.kind,
            "name": plan.name,
            "uid": doc["metadata"].get("uid", "<uid of the GLMDeployment>"),
        }
        # The shared cache's claim and download Job come first: the operator applies the workload once it succeeded.
        rendered.extend(storage_plan(plan, glmd, owner, (), DownloadSettings()).objects)
        rendered.extend(render_objects(plan, glmd, owner, lws_available=lws))
    stdout.write(yaml.dump_all(rendered, Dumper=PlainDumper, sort_keys=False))
    return 0


class PlainDumper(yaml.SafeDumper):
    """Writes a value shared by several objects out each time: no `&id001` anchors, which some tools refuse."""

    def ignore_aliases(self, data: object) -> bool:
        return True
