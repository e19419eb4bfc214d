"""The operator's own Prometheus metrics: canary outcomes per deployment and check."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

from glm_operator.canary.results import SuiteResult

CANARY_RUNS = Counter(
    "glmops_canary_runs", "Canary suite runs against serving pods.", ["namespace", "glmdeployment", "result"]
)
CANARY_CHECK = Gauge(
    "glmops_canary_check_value", "Last measured value of each canary check.", ["namespace", "glmdeployment", "check"]
)
CANARY_CHECK_PASSED = Gauge(
    "glmops_canary_check_passed", "1 when the last run of the check passed.", ["namespace", "glmdeployment", "check"]
)


def record_suite(namespace: str, name: str, result: SuiteResult) -> None:
    CANARY_RUNS.labels(namespace, name, "pass" if result.passed else "fail").inc()
    for check in result.checks:
        if check.value is not None:
            CANARY_CHECK.labels(namespace, name, check.name).set(check.value)
        CANARY_CHECK_PASSED.labels(namespace, name, check.name).set(1 if check.passed else 0)


def record_unreachable(namespace: str, name: str) -> None:
    """A canary attempt that could not ask a pod at all (counted once the gate reports it)."""
    CANARY_RUNS.labels(namespace, name, "unreachable").inc()


def serve_metrics(port: int) -> None:
    start_http_server(port)
