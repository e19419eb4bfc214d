"""The webhook's request screen: every hostile body gets its 4xx and a message naming what is wrong."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.k8s import admission_review
from glm_operator.k8s.admission_review import MAX_DEPTH, Refusal, check_request_line, check_structure, parse_review
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


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_KEYS = st.text(alphabet='[]{}"\\,: ab\n\u2028', max_size=6)  # keys and strings full of what the scan must skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _KEYS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=120,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(value=_JSON, indent=st.sampled_from([None, 1]))
def test_the_unparsed_depth_count_agrees_with_the_parsed_one(value: object, indent: int | None) -> None:
    """Strings holding brackets, quotes and escapes do not fool the byte scan that runs before json.loads."""
    for wrap in (0, MAX_DEPTH - _depth(value), MAX_DEPTH + 1 - _depth(value)):
        nested: object = value
        for _ in range(max(wrap, 0)):
            nested = [nested]
        body = json.dumps(nested, indent=indent).encode()
        if _depth(nested) > MAX_DEPTH:
            with pytest.raises(Refusal, match="nested more than"):
                check_structure(body)
        else:
            check_structure(body)


_ONE_CHARACTER_AT_A_TIME = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(body=st.binary(max_size=300) | st.text(alphabet='"\\ab{[\n', max_size=60).map(str.encode))
def test_the_string_scan_blanks_what_the_plain_pattern_blanks(body: bytes) -> None:
    """The scan's string pattern (runs between escapes) matches exactly what one character at a time matches."""
    assert admission_review._STRING.sub(b'""', body) == _ONE_CHARACTER_AT_A_TIME.sub(b'""', body)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(body=st.binary(max_size=400) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_any_body_is_a_review_or_a_4xx(body: bytes) -> None:
    try:
        parse_review(body, RESOURCES)
    except Refusal as refusal:
        assert 400 <= refusal.status < 500 and refusal.message
