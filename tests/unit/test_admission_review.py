"""The webhook's request screen: every hostile body gets its 4xx and a message naming what is wrong."""

from __future__ import annotations

import json

import pytest

from glm_operator.k8s.admission_review import Refusal, check_request_line, parse_review
from glm_operator.k8s.webhooks import RESOURCES, WEBHOOK_IDS
from tests.support.hostile_reviews import HOSTILE, VALID, Hostile, review, valid_object


@pytest.mark.parametrize("case", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_request_is_refused_with_its_status_and_a_short_message(case: Hostile) -> None:
    with pytest.raises(Refusal) as refused:
        check_request_line(case.path.lstrip("/"), case.content_type, WEBHOOK_IDS)
        parse_review(case.body, RESOURCES)
    assert refused.value.status == case.status
    assert 0 < len(refused.value.message) < 300


@pytest.mark.parametrize("path", sorted(WEBHOOK_IDS))
def test_a_review_as_the_api_server_sends_it_passes_on_both_webhooks(path: str) -> None:
    check_request_line(path, "application/json", WEBHOOK_IDS)
    assert parse_review(VALID, RESOURCES)["request"]["object"]["spec"]["parallelism"]["tensor"] == 8


@pytest.mark.parametrize(
    "changes",
    [
        {"operation": "UPDATE", "oldObject": valid_object()},
        {"operation": "DELETE", "object": None, "oldObject": {"metadata": {}}},
    ],
    ids=["update", "delete"],
)
def test_update_and_delete_reviews_pass(changes: dict[str, object]) -> None:
    parse_review(json.dumps(review(valid_object(), **changes)).encode(), RESOURCES)


@pytest.mark.parametrize(
    "body, says",
    [
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": null}', "request: must be"),
        (json.dumps(review("x")).encode(), "request.object: must be an object"),
        (json.dumps(review({"metadata": None})).encode(), "request.object.metadata: must be an object"),
        (b"[" * 10_000 + b"]" * 10_000, "nested more than 64 levels"),
        (b'{"a": ' + b"1" * 5000 + b"}", "4300"),
    ],
    ids=["request-null", "string-object", "metadata-null", "deep", "long-integer"],
)
def test_the_refusal_names_the_field_or_the_limit(body: bytes, says: str) -> None:
    with pytest.raises(Refusal, match=says):
        parse_review(body, RESOURCES)
