"""The canary gate's decisions for one pod: when to pass, when to fail, when to look again.

A pod that has never passed fails at once and is retried with backoff (15 s doubling to 10 min). A
Ready pod is taken out only after `failuresToUnready` consecutive failed re-checks, so one slow or
unlucky answer does not flap it. A server container that restarts (OOM, a failed liveness probe, a
crash) is another server: its gate goes False at once and the canaries judge it before it serves.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Literal

from glm_operator.api import GLMDeployment
from glm_operator.api.conditions import now_rfc3339
from glm_operator.api.constants import CANARY_CONDITION, SERVER_CONTAINER, Reason
from glm_operator.canary.gsm8k_data import Item
from glm_operator.canary.results import SuiteResult
from glm_operator.canary.suite import DEFAULT_GSM8K_EXPECTED, DEFAULT_GSM8K_THRESHOLD, SuiteInputs
from glm_operator.catalog.bundle import Catalogs

Decision = tuple[Literal["True", "False"], str, str]
FIRST_RETRY_S, MAX_RETRY_S = 15.0, 600.0
# A pod whose server cannot be asked (not up yet, not this model, an error in the check itself): retried with
# backoff, without touching the gate or the failure count of the checks that did run.
FIRST_UNREACHABLE_S, MAX_UNREACHABLE_S = 5.0, 120.0
UNREACHABLE_REPORT_AFTER = 3
NEVER_S = 365 * 24 * 3600.0


def pod_is_serving_ready(status: dict[str, Any]) -> bool:
    """The server container is up (its readiness probe passes): time to ask it questions."""
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conds.get("ContainersReady") == "True"


def _server_status(status: dict[str, Any]) -> dict[str, Any]:
    return next(
        (c for c in status.get("containerStatuses") or [] if isinstance(c, dict) and c.get("name") == SERVER_CONTAINER),
        {},
    )


def server_restarts(status: dict[str, Any]) -> int | None:
    """How often the kubelet has restarted the server container (None before it reports the container)."""
    count = _server_status(status).get("restartCount")
    return count if isinstance(count, int) else None


def server_started_at(status: dict[str, Any]) -> datetime.datetime | None:
    """When the running server container started (None while it is not running)."""
    return parse_rfc3339(((_server_status(status).get("state") or {}).get("running") or {}).get("startedAt"))


@dataclass
class GateState:
    gate: str | None = None
    failures: int = 0
    unreachable: int = 0  # consecutive attempts that could not run the suite at all

    def could_not_run(self) -> float:
        """The suite could not run this time: how long to wait before the next attempt."""
        self.unreachable += 1
        return float(min(FIRST_UNREACHABLE_S * 2.0 ** (self.unreachable - 1), MAX_UNREACHABLE_S))

    def unreachable_verdict(self, detail: str, failures_to_unready: int) -> Decision | None:
        """After enough attempts in a row that could not ask the pod at all: hold it out, saying why.

        A pod not yet Ready is held out with the reason after UNREACHABLE_REPORT_AFTER attempts (about 35 s of
        backoff plus the requests' own timeouts); a Ready pod only once `failuresToUnready` is reached as well,
        so one network blip does not take it out of service.
        """
        needed = UNREACHABLE_REPORT_AFTER
        if self.gate == "True":
            needed = max(needed, failures_to_unready)
        if self.unreachable < needed:
            return None
        self.gate = "False"
        self.failures = 0
        return "False", Reason.CANARY_UNREACHABLE, f"the canary cannot ask this pod: {detail}"

    def unreachable_report(self, detail: str) -> dict[str, Any]:
        return {
            "passed": False,
            "failed": ["unreachable"],
            "message": f"the canary cannot ask this pod ({self.unreachable} attempts in a row): {detail}",
            "checkedAt": now_rfc3339(),
        }

    def resume(
        self, condition: str | None, report: Any, recheck_seconds: int, now: datetime.datetime | None = None
    ) -> float:
        """Pick up after an operator restart from what the pod and status recorded: the delay to the first run.

        A pod whose gate is True and whose last report passed within `recheck_seconds` is trusted until its
        next re-check is due, so a restarted operator does not send every serving pod the whole suite at once.
        """
        if condition not in ("True", "False"):
            return 0.0
        self.gate = condition
        if condition != "True" or not isinstance(report, dict) or report.get("passed") is not True:
            return 0.0
        checked = parse_rfc3339(report.get("checkedAt"))
        if checked is None:
            return 0.0
        if recheck_seconds <= 0:
            return NEVER_S
        age = ((now or datetime.datetime.now(datetime.UTC)) - checked).total_seconds()
        return max(float(recheck_seconds) - max(age, 0.0), 0.0)

    @staticmethod
    def restarted_since(report: Any, started: datetime.datetime | None) -> bool:
        """Whether the server container started after the report its gate stands on (it restarted unwatched)."""
        checked = parse_rfc3339(report.get("checkedAt")) if isinstance(report, dict) else None
        return started is not None and checked is not None and started > checked

    def restarted(self, restarts: int | None) -> Decision:
        """The server container restarted: the verdicts so far judged another process. Out until it passes again."""
        self.gate, self.failures, self.unreachable = "False", 0, 0
        count = f" (restart {restarts})" if restarts is not None else ""
        return "False", Reason.SERVER_RESTARTED, f"the server container restarted{count}; the canaries judge it again"

    def observe(self, result: SuiteResult, failures_to_unready: int) -> Decision | None:
        self.unreachable = 0
        if result.passed:
            self.failures = 0
            self.gate = "True"
            return "True", Reason.CANARY_PASSED, f"all {len(result.checks)} checks passed"
        self.failures += 1
        if self.gate == "True" and self.failures < failures_to_unready:
            return None
        self.gate = "False"
        failed = result.failed()
        return "False", Reason.CANARY_FAILED, "; ".join(c.summary() for c in failed)

    def next_delay(self, result: SuiteResult, recheck_seconds: int) -> float:
        if result.passed:
            return float(recheck_seconds) if recheck_seconds > 0 else NEVER_S
        if self.gate == "True":  # Ready, counting failures towards failuresToUnready
            return min(float(recheck_seconds) or FIRST_RETRY_S, FIRST_RETRY_S)
        return float(min(FIRST_RETRY_S * 2.0 ** (self.failures - 1), MAX_RETRY_S))

    def report(self, result: SuiteResult) -> dict[str, Any]:
        return {
            "passed": result.passed,
            "failed": [c.name for c in result.failed()],
            "message": "; ".join(c.summary() for c in (result.failed() or result.checks)),
            "checkedAt": now_rfc3339(),
        }


def gate_condition(pod: dict[str, Any]) -> str | None:
    """The status ("True"/"False") of the canary readiness-gate condition a pod carries, if any."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == CANARY_CONDITION:
            status = cond.get("status")
            return status if status in ("True", "False") else None
    return None


def parse_rfc3339(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def suite_inputs_for(glmd: GLMDeployment, catalogs: Catalogs, questions: list[Item], shots: list[Item]) -> SuiteInputs:
    """What one canary run needs: the deployment's canary settings and its model's GSM8K figures."""
    lookup = catalogs.models.lookup(glmd.spec.model.name)
    threshold = lookup.model.gsm8k_threshold if lookup else DEFAULT_GSM8K_THRESHOLD
    expected = lookup.model.gsm8k_expected if lookup else DEFAULT_GSM8K_EXPECTED
    return SuiteInputs(
        config=glmd.spec.canary,
        questions=questions,
        shots=shots,
        speculative=glmd.spec.engine.speculative is not None,
        gsm8k_threshold=threshold,
        gsm8k_expected=expected,
    )


def summarize(reports: dict[str, Any]) -> str:
    """One line over every pod's last canary run, for status.canary.summary."""
    live = {k: v for k, v in reports.items() if v}
    passed = sum(1 for r in live.values() if r.get("passed"))
    failing = [f"{pod}: {r.get('message', '')}" for pod, r in sorted(live.items()) if not r.get("passed")]
    head = f"{passed}/{len(live)} pods passed"
    return (
        f"{head}; failing {failing[0]}" + (f" (+{len(failing) - 1} more)" if len(failing) > 1 else "")
        if failing
        else head
    )
