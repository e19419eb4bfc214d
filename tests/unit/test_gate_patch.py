"""The readiness-gate patch carries only our condition and is skipped when nothing changes."""

from __future__ import annotations

from typing import Any

from glm_operator.api.constants import CANARY_CONDITION, Reason
from glm_operator.canary.supervisor import gate_view
from glm_operator.k8s import pods
from glm_operator.k8s.pods import gate_patch

CURRENT = {"type": CANARY_CONDITION, "status": "True", "reason": Reason.CANARY_PASSED, "message": "ok"}


def pod(*conditions: dict) -> dict:
    return {"status": {"conditions": list(conditions)}}


def test_patch_carries_only_the_canary_condition() -> None:
    patch = gate_patch(pod({"type": "Ready", "status": "False"}), "True", Reason.CANARY_PASSED, "ok")
    assert patch is not None
    (only,) = patch["status"]["conditions"]
    assert (only["type"], only["status"], only["reason"]) == (CANARY_CONDITION, "True", Reason.CANARY_PASSED)


def test_same_status_reason_and_message_is_not_written_again() -> None:
    current = {"type": CANARY_CONDITION, "status": "True", "reason": Reason.CANARY_PASSED, "message": "ok"}
    assert gate_patch(pod(current), "True", Reason.CANARY_PASSED, "ok") is None


def test_transition_time_is_kept_while_the_status_holds() -> None:
    current = {
        "type": CANARY_CONDITION,
        "status": "False",
        "reason": "GSM8K",
        "message": "a",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = gate_patch(pod(current), "False", "GSM8K", "b")
    assert patch is not None and patch["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = gate_patch(pod(current), "True", Reason.CANARY_PASSED, "ok")
    assert flipped is not None and flipped["status"]["conditions"][0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_a_verdict_the_gates_view_already_shows_is_decided_without_reading_the_pod(monkeypatch: Any) -> None:
    """The gate passes its watched view of the pod: an unchanged verdict sends nothing and reads nothing."""
    calls: list[str] = []

    class Api:
        api_client = type("C", (), {"sanitize_for_serialization": staticmethod(lambda o: o)})()

        def read_namespaced_pod_status(self, *_: Any) -> dict:
            calls.append("read")
            return pod()

        def patch_namespaced_pod_status(self, name: str, namespace: str, patch: dict, **_: Any) -> dict:
            calls.append("patch")
            return {"metadata": {"name": name, "resourceVersion": "8"}, **patch}

    monkeypatch.setattr(pods, "core_v1", Api)
    seen = gate_view(pod(dict(CURRENT, lastTransitionTime="2026-01-01T00:00:00Z"), {"type": "Ready", "status": "True"}))
    assert pods.set_gate("ns", "p", "True", Reason.CANARY_PASSED, "ok", seen) is None
    assert calls == []
    stored = pods.set_gate("ns", "p", "False", "GSM8K", "2/50", seen)
    assert calls == ["patch"] and stored is not None and stored["metadata"]["resourceVersion"] == "8"
    assert pods.set_gate("ns", "p", "False", "GSM8K", "2/50") is not None and calls == ["patch", "read", "patch"]
