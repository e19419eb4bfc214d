"""How `glmctl` prints objects with `-o yaml|json`, as kubectl prints them.

- yaml: one document per object, `---` between them (what `kubectl apply -f` reads back), with no
  `&id001` anchors: a value shared by several objects is written out each time, as some tools refuse aliases.
- json: one object alone, several wrapped in a `v1 List` (what `kubectl get -o json` prints for several),
  indented by four spaces as kubectl indents.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

import yaml

OBJECT_FORMATS = ("yaml", "json")


class PlainDumper(yaml.SafeDumper):
    """Writes a value shared by several objects out each time: no `&id001` anchors, which some tools refuse."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """A `v1 List` of the objects, with the empty metadata kubectl writes."""
    return {"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {"resourceVersion": ""}}


def write_objects(objects: list[dict[str, Any]], output: str, stdout: TextIO) -> None:
    """Print Kubernetes objects in `output` format (one of OBJECT_FORMATS)."""
    if output == "json":
        json.dump(objects[0] if len(objects) == 1 else as_list(objects), stdout, indent=4)
        stdout.write("\n")
    else:
        stdout.write(yaml.dump_all(objects, Dumper=PlainDumper, sort_keys=False))


def write_data(data: Any, output: str, stdout: TextIO) -> None:
    """Print a report that is not a Kubernetes object (validate's results) as one JSON or YAML value."""
    if output == "json":
        json.dump(data, stdout, indent=2)
        stdout.write("\n")
    else:
        stdout.write(yaml.dump(data, Dumper=PlainDumper, sort_keys=False))
