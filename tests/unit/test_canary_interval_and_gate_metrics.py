"""The canary's share of right answers comes with its 95 % Wilson interval, and each serving pod's readiness gate is a
gauge: both as the dashboard reads them, and both gone with their pod."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from glm_operator.api.constants import CANARY_CONDITION, LABEL_DEPLOYMENT
from glm_operator.canary.results import CheckResult, SuiteResult, wilson_interval
from glm_operator.handlers.canary import pod_event
from glm_operator.k8s import metrics


@pytest.mark.parametrize(
    ("right", "asked", "lower", "upper"),
    [
        # closed forms: 0/n up to z^2/(n + z^2), n/n from n/(n + z^2); 10/20: the textbook (0.299, 0.701)
        (10, 20, 0.2993, 0.7007),
        (0, 20, 0.0, 0.1611),
        (20, 20, 0.8389, 1.0),
        (94, 100, 0.8752, 0.9722),
    ],
)
def test_wilson_interval_of_a_share_of_right_answers(right: int, asked: int, lower: float, upper: float) -> None:
    low, high = wilson_interval(right, asked)
    assert (round(low, 4), round(high, 4)) == (lower, upper)


@pytest.mark.parametrize(("right", "asked"), [(1, 0), (-1, 5), (6, 5)])
def test_wilson_interval_refuses_counts_that_are_not_a_share(right: int, asked: int) -> None:
    with pytest.raises(ValueError, match="needs 0 <= right <= asked"):
        wilson_interval(right, asked)


def test_a_check_without_a_count_has_no_interval() -> None:
    assert CheckResult("gsm8k", True, 0.9, 0.85, "ok").interval() is None
    assert CheckResult("gsm8k", True, 0.9, 0.85, "ok", asked=10).interval() == wilson_interval(9, 10)


def _value(name: str, labels: dict[str, str]) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_the_interval_gauge_holds_both_bounds_and_goes_with_its_pod() -> None:
    suite = SuiteResult(
        [CheckResult("gsm8k", True, 0.5, 0.4, "10/20", asked=20), CheckResult("copy", True, 1.0, 1.0, "")]
    )
    metrics.record_suite("ns-i", "glm", "glm-0", suite)
    gsm8k = {"namespace": "ns-i", "glmdeployment": "glm", "pod": "glm-0", "check": "gsm8k"}
    assert round(_value("glmops_canary_correct_interval_ratio", {**gsm8k, "bound": "lower"}) or 0, 4) == 0.2993
    assert round(_value("glmops_canary_correct_interval_ratio", {**gsm8k, "bound": "upper"}) or 0, 4) == 0.7007
    assert _value("glmops_canary_correct_interval_ratio", {**gsm8k, "check": "copy", "bound": "lower"}) is None
    metrics.forget_pod("ns-i", "glm-0")
    assert _value("glmops_canary_correct_interval_ratio", {**gsm8k, "bound": "lower"}) is None


def _pod(gate: str | None) -> dict[str, Any]:
    conditions = [] if gate is None else [{"type": CANARY_CONDITION, "status": gate}]
    return {
        "metadata": {"namespace": "ns-g", "name": "glm-0", "labels": {LABEL_DEPLOYMENT: "glm"}},
        "status": {"conditions": conditions},
    }


async def test_the_gate_gauge_follows_the_pods_condition_as_watched_and_goes_with_the_pod() -> None:
    labels = {"namespace": "ns-g", "glmdeployment": "glm", "pod": "glm-0"}
    memo: Any = object()  # no gate tasks: the event only reaches the metrics
    await pod_event(event={"type": "ADDED", "object": _pod(None)}, memo=memo)
    assert _value("glmops_canary_gate_open", labels) is None  # not written yet: neither open nor shut
    await pod_event(event={"type": "MODIFIED", "object": _pod("False")}, memo=memo)
    assert _value("glmops_canary_gate_open", labels) == 0
    await pod_event(event={"type": "MODIFIED", "object": _pod("True")}, memo=memo)
    assert _value("glmops_canary_gate_open", labels) == 1
    await pod_event(event={"type": "DELETED", "object": _pod("True")}, memo=memo)
    assert _value("glmops_canary_gate_open", labels) is None
