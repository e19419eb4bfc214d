"""The validating webhook asks the API server about the requesting user's rights, and refuses what they lack."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from glm_operator.handlers import admission
from glm_operator.k8s.access import AccessCheckFailed
from glm_operator.rules.access import AccessNeed
from tests.support.authorizer import fake_authorizer
from tests.support.builders import GLMDeploymentBuilder as B

ALICE = {"username": "alice", "uid": "1", "groups": ["team-a"]}


def _obj(*pull: str) -> dict[str, Any]:
    builder = B().namespace("team-a").accelerator("H200").tensor(8)
    return builder.set("spec.pod.imagePullSecrets", [{"name": n} for n in pull]).build()


def _validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    body = kopf.Body(obj)  # type: ignore[arg-type]
    old_body = kopf.Body(old) if old is not None else None  # type: ignore[arg-type]
    asyncio.run(admission.validate(body=body, userinfo=ALICE, warnings=[], memo=kopf.Memo(), old=old_body))


def _authorizer(monkeypatch: pytest.MonkeyPatch, readable: set[str]) -> list[tuple[str, str, str]]:
    asked: list[tuple[str, str, str]] = []

    def denied(needs: Sequence[AccessNeed], namespace: str, userinfo: dict[str, Any]) -> list[AccessNeed]:
        asked.extend((namespace, userinfo["username"], n.name) for n in needs)
        return [n for n in needs if n.name not in readable]

    monkeypatch.setattr(admission, "denied", denied)
    monkeypatch.setattr(admission, "all_granted", lambda *_: False)  # every need goes to `denied` above
    return asked


def _names(reviews: list[Any]) -> list[str]:
    return [r.spec.resource_attributes.name for r in reviews]


def test_rights_granted_a_moment_ago_are_answered_without_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first review asks the API server (in a thread: the SubjectAccessReview blocks); the next one within the
    grant's lifetime reads the remembered grant on the event loop."""
    reviews = fake_authorizer(monkeypatch, allowed={"mine", "also-mine"})
    threads: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn: Any, *args: Any) -> Any:
        threads.append(fn.__name__)
        return await to_thread(fn, *args)

    monkeypatch.setattr(admission.asyncio, "to_thread", counted)
    _validate(_obj("mine"))
    _validate(_obj("mine"))
    assert _names(reviews) == ["mine"] and threads == ["denied"]
    _validate(_obj("mine", "also-mine"))  # a need not yet granted: asked, in a thread
    assert _names(reviews) == ["mine", "also-mine"] and threads == ["denied", "denied"]


def test_a_secret_the_author_may_not_read_is_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _authorizer(monkeypatch, readable={"mine"})
    with pytest.raises(kopf.AdmissionError) as refused:
        _validate(_obj("mine", "theirs"))
    assert asked == [("team-a", "alice", "mine"), ("team-a", "alice", "theirs")]
    message = str(refused.value)
    assert "1 problem(s)" in message
    assert "spec.pod.imagePullSecrets[1].name: theirs: alice may not get Secret team-a/theirs" in message


def test_secrets_the_author_may_read_are_admitted(monkeypatch: pytest.MonkeyPatch) -> None:
    _authorizer(monkeypatch, readable={"mine"})
    _validate(_obj("mine"))


def test_an_update_asks_only_about_what_it_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _authorizer(monkeypatch, readable=set())
    _validate(_obj("theirs"), old=_obj("theirs"))
    assert asked == []
    with pytest.raises(kopf.AdmissionError, match="imagePullSecrets\\[1\\]"):
        _validate(_obj("theirs", "new"), old=_obj("theirs"))
    assert [name for _, _, name in asked] == ["new"]


def test_rule_problems_and_rights_problems_come_in_one_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    _authorizer(monkeypatch, readable=set())
    obj = _obj("theirs")
    obj["spec"]["engine"]["env"] = [{"name": "LD_PRELOAD", "value": "/x.so"}]
    reviews = {"webhook": "validate", "outcome": "refused"}
    before = REGISTRY.get_sample_value("glmops_admission_reviews_total", reviews) or 0
    refusals = _refused_findings()
    with pytest.raises(kopf.AdmissionError) as refused:
        _validate(obj)
    assert "2 problem(s)" in str(refused.value) and "LD_PRELOAD" in str(refused.value)
    assert REGISTRY.get_sample_value("glmops_admission_reviews_total", reviews) == before + 1
    assert _refused_findings() == refusals + 2  # the rule's finding and the author's missing right


def _refused_findings() -> float:
    return sum(
        s.value
        for family in REGISTRY.collect()
        if family.name == "glmops_admission_findings"
        for s in family.samples
        if s.name.endswith("_total") and s.labels["outcome"] == "refused"
    )


def test_when_the_api_server_cannot_answer_admission_refuses_with_a_retryable_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable(*_: Any) -> list[AccessNeed]:
        raise AccessCheckFailed("the API server did not answer")

    monkeypatch.setattr(admission, "denied", unreachable)
    with pytest.raises(kopf.AdmissionError) as refused:
        _validate(_obj("theirs"))
    assert refused.value.code == 429 and "could not check the author's rights" in str(refused.value)
