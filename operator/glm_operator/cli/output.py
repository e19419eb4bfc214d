"""How `glmctl` prints objects with `-o yaml|json`, as kubectl prints them.

- yaml: one document per object, `---` between them (what `kubectl apply -f` reads back), with no
  `&id001` anchors: a value shared by several objects is written out each time, as some tools refuse aliases.
- json: one object alone, several wrapped in a `v1 List` (what `kubectl get -o json` prints for several),
  indented by four spaces as kubectl indents.
"""

from __future__ import annotations

import json
import textwrap
from types import TracebackType
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


class ObjectStream:
    """Writes objects as they come, in write_objects' format, so a reader sees the first before the last is made.

    yaml writes each document at once. json holds back only the first object: one alone is printed as itself,
    several as a `v1 List` whose items are written one by one, byte for byte what write_objects prints.
    """

    def __init__(self, output: str, stdout: TextIO) -> None:
        self.output, self.stdout = output, stdout
        self.count = 0
        self._first: dict[str, Any] | None = None

    def write(self, obj: dict[str, Any]) -> None:
        self.count += 1
        if self.output != "json":
            self.stdout.write(("---\n" if self.count > 1 else "") + yaml.dump(obj, Dumper=PlainDumper, sort_keys=False))
        elif self.count == 1:
            self._first = obj
        else:
            if self._first is not None:
                self.stdout.write(_LIST_HEAD + _list_item(self._first))
                self._first = None
            self.stdout.write(",\n" + _list_item(obj))

    def flush(self) -> None:
        self.stdout.flush()

    def close(self) -> None:
        """End the output: json's single object or empty List, or the List's tail; yaml needs nothing."""
        if self.output == "json" and self.count <= 1:
            write_objects([self._first] if self._first is not None else [], "json", self.stdout)
        elif self.output == "json":
            self.stdout.write(_LIST_TAIL)

    def __enter__(self) -> ObjectStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, _: BaseException | None, __: TracebackType | None) -> None:
        if kind is None:
            self.close()


_LIST_INDENT = " " * 8
_LIST_HEAD = '{\n    "apiVersion": "v1",\n    "items": [\n'
_LIST_TAIL = '\n    ],\n    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n'


def _list_item(obj: dict[str, Any]) -> str:
    return textwrap.indent(json.dumps(obj, indent=4), _LIST_INDENT, lambda _: True)


def write_data(data: Any, output: str, stdout: TextIO) -> None:
    """Print a report that is not a Kubernetes object (validate's results) as one JSON or YAML value."""
    if output == "json":
        json.dump(data, stdout, indent=2)
        stdout.write("\n")
    else:
        stdout.write(yaml.dump(data, Dumper=PlainDumper, sort_keys=False))
