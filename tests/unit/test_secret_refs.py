"""A GLMDeployment can name only Secrets of its own namespace: a Secret reference has no namespace field.

When a new Secret reference is added to the API, `test_the_spec_names_secrets_only_here` fails: extend
tests/e2e/test_secret_hygiene.py to plant a value in it too.
"""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.crd import build_crd
from glm_operator.api.v1alpha1 import SecretKeyRef
from glm_operator.catalog.bundle import Catalogs
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.secret_refs import secret_reference_paths


def test_the_spec_names_secrets_only_here() -> None:
    assert secret_reference_paths() == ["spec.model.tokenSecret"]


def test_a_secret_reference_is_a_name_and_a_key_and_nothing_else() -> None:
    assert {f.alias or n for n, f in SecretKeyRef.model_fields.items()} == {"name", "key"}


def _crd_node(path: str) -> dict[str, Any]:
    (version,) = build_crd()["spec"]["versions"]
    node: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        node = node["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            node = node["items"]
    return node


@pytest.mark.parametrize("path", secret_reference_paths())
def test_the_crd_gives_no_secret_reference_a_namespace(path: str) -> None:
    node = _crd_node(path)
    assert set(node["properties"]) == {"name", "key"}
    assert "namespace" not in node["properties"] and not node.get("x-kubernetes-preserve-unknown-fields")


def test_a_secret_reference_into_another_namespace_is_refused_at_admission() -> None:
    obj = (
        B()
        .accelerator("H200")
        .tensor(8)
        .set("spec.model.tokenSecret", {"name": "hf", "namespace": "kube-system"})
        .build()
    )
    result = admit(obj, Catalogs.packaged())
    assert not result.allowed
    assert any("tokenSecret" in f.field and f.rule == "schema" for f in result.errors), result.rejection()
