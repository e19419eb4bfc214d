"""One truth for field names: the generated CRD, the pydantic models, the docs and `glmctl validate` agree.

The committed CRD is walked property by property. Each name must be the one the models serialize,
every `spec.*` path the docs mention must exist in it, and every field spelled the way the API server
would refuse it (snake_case, wrong type, out of range) must be refused by `glmctl validate` too.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from glm_operator.api import GLMDeploymentSpec
from glm_operator.catalog.bundle import Catalogs
from glm_operator.rules.engine import admit
from tests.support.cluster import REPO

CRD = yaml.safe_load((REPO / "crds/glmops.dev_glmdeployments.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]
BASELINE = yaml.safe_load((REPO / "samples/baseline-h200-glm53-fp8.yaml").read_text())
CATALOGS = Catalogs.packaged()
MESSAGE = re.compile(r"^(?P<path>spec[\w.\[\]]*): (?P<value>.+?): (?P<problem>.+) \(rule schema\)\. (?P<fix>.+)\.$")


def walk(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, schema) of every property below `schema`; `[]` stands for a list item."""
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        out.append((here, sub))
        out.extend(walk(sub, here))
        if sub.get("type") == "array" and "properties" in (sub.get("items") or {}):
            out.extend(walk(sub["items"], f"{here}[]"))
    return out


FIELDS = walk(SPEC, "spec")
LEAVES = [(p, s) for p, s in FIELDS if s.get("type") not in ("object", None) or "properties" not in s]
PATHS = {p.replace("[]", "") for p, _ in FIELDS}


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def with_field(path: str, value: Any, leaf_name: str | None = None) -> dict[str, Any]:
    """The baseline sample with `path` set to `value` (parents made as needed; `[]` makes one item)."""
    obj = copy.deepcopy(BASELINE)
    parts = path.split(".")
    node: Any = obj
    for part in parts[:-1]:
        key, is_list = (part[:-2], True) if part.endswith("[]") else (part, False)
        nxt = node.get(key)
        if is_list:
            if not isinstance(nxt, list) or not nxt:
                nxt = node[key] = [{}]
            nxt = nxt[0]
        elif not isinstance(nxt, dict):
            nxt = node[key] = {}
        node = nxt
    node[leaf_name or parts[-1]] = value
    return obj


def refusals(obj: dict[str, Any]) -> list[re.Match[str]]:
    result = admit(obj, CATALOGS)
    assert not result.allowed, f"admitted: {obj['spec']}"
    matches = [MESSAGE.match(f.message) for f in result.errors]
    assert all(matches), [f.message for f in result.errors]
    return [m for m in matches if m]


def test_the_gsm8k_canary_field_is_spelled_gsm8k() -> None:
    assert "gsm8k" in SPEC["properties"]["canary"]["properties"]
    assert "gsm8K" not in (REPO / "crds/glmops.dev_glmdeployments.yaml").read_text()


def _model_fields(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[tuple[str, str, str]]:
    """(path, wire name of each model field, the CRD's property names) for a model and its sub-models."""
    out = []
    names = sorted(f.serialization_alias or f.alias or n for n, f in model.model_fields.items())
    out.append((path, ",".join(names), ",".join(sorted(schema.get("properties") or {}))))
    for name, field in model.model_fields.items():
        wire = field.serialization_alias or field.alias or name
        sub = (schema.get("properties") or {}).get(wire, {})
        for kind in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out.extend(_model_fields(kind, sub.get("items", sub), f"{path}.{wire}"))
    return out


@pytest.mark.parametrize("path, model_names, crd_names", _model_fields(GLMDeploymentSpec, SPEC, "spec"))
def test_each_crd_object_has_exactly_the_fields_the_models_serialize(
    path: str, model_names: str, crd_names: str
) -> None:
    assert model_names == crd_names


def test_a_default_spec_serializes_only_names_the_crd_knows() -> None:
    dumped = GLMDeploymentSpec.model_validate(BASELINE["spec"]).model_dump(by_alias=True)

    def paths(node: Any, path: str) -> set[str]:
        if not isinstance(node, dict):
            return set()
        return {f"{path}.{k}" for k in node} | {p for k, v in node.items() for p in paths(v, f"{path}.{k}")}

    assert paths(dumped, "spec") - PATHS == set()


DOCS = [REPO / "README.md", REPO / "samples/README.md", *sorted((REPO / "docs").glob("*.md"))]
# A path the docs write about another kind's spec, named by the words around it.
OTHER_KINDS = re.compile(r"GLMImage|Deployment's|StatefulSet's|LeaderWorkerSet's")


def doc_mentions() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            if OTHER_KINDS.search(line):
                continue
            for m in re.finditer(r"(?<![\w.])spec(?:\.[A-Za-z][A-Za-z0-9]*)+", line):
                out.append((str(doc.relative_to(REPO)), m.group(0)))
    return sorted(set(out))


def test_the_docs_mention_spec_fields() -> None:
    assert len(doc_mentions()) >= 5


@pytest.mark.parametrize("doc, path", doc_mentions())
def test_every_spec_path_the_docs_mention_is_in_the_crd(doc: str, path: str) -> None:
    assert path in PATHS, f"{doc} mentions {path}, which the CRD does not have"


SNAKE_LEAVES = [(p, s) for p, s in FIELDS if snake(p.rsplit(".", 1)[1]) != p.rsplit(".", 1)[1]]


@pytest.mark.parametrize("path, schema", SNAKE_LEAVES, ids=[p for p, _ in SNAKE_LEAVES])
def test_a_field_written_in_snake_case_is_refused_as_the_api_server_refuses_it(path: str, schema: Any) -> None:
    parent, name = path.rsplit(".", 1)
    parent_schema = dict(FIELDS).get(parent.removesuffix("[]"), SPEC)
    parent_schema = parent_schema.get("items", parent_schema) if parent.endswith("[]") else parent_schema
    assert snake(name) not in parent_schema["properties"], "the API server would accept it"
    value = schema.get("default", 1 if schema.get("type") in ("integer", "number") else {})
    found = refusals(with_field(path, value, leaf_name=snake(name)))
    wrong = parent.replace("[]", "[0]") + "." + snake(name)
    hit = [m for m in found if m["path"] == wrong]
    assert hit and "unknown field" in hit[0]["problem"]
    assert hit[0]["fix"] == f"Write it {parent.replace('[]', '[0]')}.{name}"


WRONG_TYPE = {"string": 12, "integer": "1", "number": "x", "boolean": "yes", "array": "a", "object": "b"}


@pytest.mark.parametrize("path, schema", LEAVES, ids=[p for p, _ in LEAVES])
def test_every_leaf_refuses_a_value_of_the_wrong_type(path: str, schema: dict[str, Any]) -> None:
    found = refusals(with_field(path, WRONG_TYPE[schema["type"]]))
    assert path.replace("[]", "[0]") in [m["path"] for m in found]
    assert any(f"must be of type {schema['type']}" in m["problem"] for m in found)


def out_of_range() -> list[tuple[str, Any, str]]:
    cases = []
    for path, s in LEAVES:
        if "maximum" in s:
            cases.append((path, s["maximum"] + 1, "less than or equal to"))
        if "minimum" in s:
            cases.append((path, s["minimum"] - 1, "greater than or equal to"))
        if "maxLength" in s:
            cases.append((path, "a" * (s["maxLength"] + 1), "at most"))
        if "enum" in s:
            cases.append((path, "NotAValue", "must be one of"))
        if "maxItems" in s:
            cases.append((path, ["--x"] * (s["maxItems"] + 1), "at most"))
    return cases


@pytest.mark.parametrize("path, value, words", out_of_range(), ids=[f"{p}={str(v)[:12]}" for p, v, _ in out_of_range()])
def test_every_bound_of_the_schema_is_enforced_offline(path: str, value: Any, words: str) -> None:
    found = refusals(with_field(path, value))
    assert any(m["path"] == path.replace("[]", "[0]") and words in m["problem"] for m in found)


def test_an_unknown_field_names_the_fields_that_exist_there() -> None:
    (m,) = refusals(with_field("spec.canary.gsm8k.maxQuestion", 5))
    assert m["path"] == "spec.canary.gsm8k.maxQuestion"
    assert m["fix"] == "Fields here: chat, concurrency, enabled, maxQuestions, source, threshold"


def test_the_old_generated_spelling_gsm8K_is_refused_with_the_right_one() -> None:
    (m,) = refusals(with_field("spec.canary.gsm8K.maxQuestions", 5))
    assert (m["path"], m["fix"]) == ("spec.canary.gsm8K", "Write it spec.canary.gsm8k")


def test_a_null_is_dropped_as_the_api_server_prunes_it() -> None:
    assert admit(with_field("spec.replicas", None), CATALOGS).allowed


def test_duplicate_env_names_are_refused_as_duplicate_list_map_keys() -> None:
    obj = copy.deepcopy(BASELINE)
    obj["spec"]["engine"]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    (m,) = refusals(obj)
    assert (m["path"], m["problem"]) == ("spec.engine.env[1]", "duplicate entry (name=A)")


def test_the_samples_pass_the_structural_check() -> None:
    for sample in sorted(Path(REPO / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(sample.read_text()):
            result = admit(doc, CATALOGS)
            assert not [f.message for f in result.errors if f.rule == "schema"], sample.name
