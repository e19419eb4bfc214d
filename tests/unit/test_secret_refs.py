"""A GLMDeployment can name only Secrets of its own namespace, and only ones its author may read.

A Secret reference has no namespace field, and admission checks each named Secret against the author's rights
(rules/access.py SECRET_REFERENCE_FIELDS, a SubjectAccessReview each). When the API gains another field that can
name a Secret, `test_every_field_that_can_name_a_secret_is_checked_against_the_authors_rights` fails: add it to
SECRET_REFERENCE_FIELDS and access_needs, and extend tests/e2e/test_secret_hygiene.py to plant a value in it too.
"""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api import GLMDeploymentSpec
from glm_operator.api.crd import build_crd
from glm_operator.api.v1alpha1 import SecretKeyRef
from glm_operator.catalog.bundle import Catalogs
from glm_operator.rules.access import SECRET_REFERENCE_FIELDS, access_needs
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.secret_refs import secret_reference_paths


def test_every_field_that_can_name_a_secret_is_checked_against_the_authors_rights() -> None:
    assert secret_reference_paths() == list(SECRET_REFERENCE_FIELDS)


# One way each field names the Secret "theirs": admission must ask whether the author may get it.
NAMING_THEIRS: dict[str, tuple[str, Any]] = {
    "spec.model.tokenSecret": ("spec.model.tokenSecret", {"name": "theirs", "key": "token"}),
    "spec.pod.imagePullSecrets[]": ("spec.pod.imagePullSecrets", [{"name": "theirs"}]),
    "spec.pod.volumes[]": ("spec.pod.volumes", [{"name": "v", "secret": {"secretName": "theirs"}}]),
}


@pytest.mark.parametrize("path", SECRET_REFERENCE_FIELDS)
def test_each_secret_reference_becomes_a_review_of_the_authors_right_to_get_it(path: str) -> None:
    dotted, value = NAMING_THEIRS[path]
    spec = GLMDeploymentSpec.model_validate(B().accelerator("H200").tensor(8).set(dotted, value).build()["spec"])
    needs = [(n.field, n.verb, n.resource, n.name) for n in access_needs(spec)]
    assert [need for need in needs if need[0].startswith(path.removesuffix("[]"))] == [
        (next(n[0] for n in needs if n[0].startswith(path.removesuffix("[]"))), "get", "secrets", "theirs")
    ]


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


def test_the_crd_gives_no_secret_reference_a_namespace() -> None:
    assert set(_crd_node("spec.model.tokenSecret")["properties"]) == {"name", "key"}
    pull = _crd_node("spec.pod.imagePullSecrets[]")
    assert set(pull["properties"]) == {"name"} and not pull.get("x-kubernetes-preserve-unknown-fields")
    # Kubernetes' secret and projected volume sources have no namespace field: the pod's namespace is theirs.


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
