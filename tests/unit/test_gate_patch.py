"""The readiness-gate patch carries only our condition and is skipped when nothing changes."""

from __future__ import annotations

from glm_operator.k8s.pods import gate_patch


def pod(*conditions: dict) -> dict:
    return {"status": {"conditions": list(conditions)}}


def test_patch_carries_only_the_canary_condition() -> None:
    patch = gate_patch(pod({"type": "Ready", "status": "False"}), "True", "CanaryPassed", "ok")
    assert patch is not None
    (only,) = patch["status"]["conditions"]
    assert (only["type"], only["status"], only["reason"]) == ("glmops.dev/canary", "True", "CanaryPassed")


def test_same_status_reason_and_message_is_not_written_again() -> None:
    current = {"type": "glmops.dev/canary", "status": "True", "reason": "CanaryPassed", "message": "ok"}
    assert gate_patch(pod(current), "True", "CanaryPassed", "ok") is None


def test_transition_time_is_kept_while_the_status_holds() -> None:
    current = {
        "type": "glmops.dev/canary",
        "status": "False",
        "reason": "GSM8K",
        "message": "a",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = gate_patch(pod(current), "False", "GSM8K", "b")
    assert patch is not None and patch["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = gate_patch(pod(current), "True", "CanaryPassed", "ok")
    assert flipped is not None and flipped["status"]["conditions"][0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"
