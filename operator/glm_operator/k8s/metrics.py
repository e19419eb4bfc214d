"""The operator's own Prometheus metrics, named by Prometheus conventions (one unit per metric, `_total` counters).

Canary figures are per serving pod (`pod` label) and per unit: the share of answers right, the share of null contents,
the share of draft tokens accepted, the mean negative log-likelihood of the prompt tokens. `glmops_canary_check_value`
mixes those units in one gauge; it stays for one release, deprecated (docs/alerts.md, "Metrics"). Every series of a
GLMDeployment goes when it is deleted, and a pod's when the pod is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from glm_operator.api.constants import ImageConditionType, ImageReason
from glm_operator.api.glmimage import ImagePhase
from glm_operator.canary.progress import CheckProgress
from glm_operator.canary.results import SuiteResult

DEPLOYMENT = ("namespace", "glmdeployment")
PER_POD = (*DEPLOYMENT, "pod")

BUILD_INFO = Gauge("glmops_build_info", "Always 1; the operator's version in the label.", ["version"])
CANARY_RUNS = Counter("glmops_canary_runs", "Canary suite runs against serving pods.", [*DEPLOYMENT, "result"])
CANARY_CHECK = Gauge(
    "glmops_canary_check_value",
    "Deprecated, removed in the next release: last value of each canary check, units mixed. Use the per-unit "
    "glmops_canary_* gauges.",
    [*DEPLOYMENT, "check"],
)
CANARY_CHECK_PASSED = Gauge(
    "glmops_canary_check_passed", "1 when the last run of the check on the pod passed.", [*PER_POD, "check"]
)
CANARY_CORRECT = Gauge(
    "glmops_canary_correct_ratio",
    "Share of the last run's answers that were right, per check (gsm8k, smoke, copy).",
    [*PER_POD, "check"],
)
CANARY_CORRECT_INTERVAL = Gauge(
    "glmops_canary_correct_interval_ratio",
    "95 % Wilson interval of glmops_canary_correct_ratio from the number of answers asked (bound lower, upper).",
    [*PER_POD, "check", "bound"],
)
CANARY_GATE = Gauge(
    "glmops_canary_gate_open",
    "1 while the pod's canary readiness gate (condition glmops.dev/canary) is True, 0 while it is False.",
    list(PER_POD),
)
CANARY_NULL_CONTENT = Gauge(
    "glmops_canary_null_content_ratio", "Share of the last run's answers with reasoning but no content.", list(PER_POD)
)
CANARY_ACCEPTANCE = Gauge(
    "glmops_canary_draft_acceptance_ratio",
    "Share of draft tokens accepted during the last run's traffic (speculative decoding).",
    list(PER_POD),
)
CANARY_NLL = Gauge(
    "glmops_canary_prompt_negative_log_likelihood",
    "Mean negative log-likelihood (nats per token) of the reference prompts in the last run.",
    list(PER_POD),
)
CANARY_QUESTIONS_ASKED = Gauge(
    "glmops_canary_questions_asked",
    "Questions of the check answered so far in the pod's canary run in progress (or its last run, once it ended).",
    [*PER_POD, "check"],
)
CANARY_RUNNING_CORRECT = Gauge(
    "glmops_canary_running_correct_ratio",
    "Share of those answers that were right so far (running accuracy), per check.",
    [*PER_POD, "check"],
)
RUNNING = (CANARY_QUESTIONS_ASKED, CANARY_RUNNING_CORRECT)

CONDITION = Gauge(
    "glmops_glmdeployment_condition",
    "1 for the status each condition of a GLMDeployment has now (True, False or Unknown), 0 for the others.",
    [*DEPLOYMENT, "type", "status"],
)
REPLICAS_DESIRED = Gauge(
    "glmops_glmdeployment_replicas_desired", "Serving replicas asked for (spec.replicas).", DEPLOYMENT
)
REPLICAS_READY = Gauge(
    "glmops_glmdeployment_replicas_ready", "Serving replicas ready (status.readyReplicas).", DEPLOYMENT
)
CONDITION_STATUSES = ("True", "False", "Unknown")
ADMISSION_REVIEWS = Counter(
    "glmops_admission_reviews", "GLMDeployment admission reviews by webhook and outcome.", ["webhook", "outcome"]
)
ADMISSION_FINDINGS = Counter(
    "glmops_admission_findings",
    "Rule findings at admission: refused (error), warned, repaired (Auto remedy applied).",
    ["rule", "outcome"],
)
RECONCILE_SECONDS = Histogram(
    "glmops_reconcile_duration_seconds",
    "Time to reconcile a GLMDeployment (render and apply its objects), by result (ok, error).",
    ["result"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
CANARY_SECONDS = Histogram(
    "glmops_canary_run_duration_seconds",
    "Time of one canary suite run against a pod, by result (pass, fail, error).",
    ["result"],
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800),
)
WEBHOOK_CERT_EXPIRY = Gauge(
    "glmops_webhook_certificate_expiry_timestamp_seconds",
    "When the serving certificate the admission webhook serves now expires (Unix time).",
)
IMAGE_BUILD_PHASE = Gauge(
    "glmops_glmimage_build_phase",
    "1 for the phase a GLMImage's build is in now (Pending, Building, Succeeded, Failed), 0 for the others.",
    ["glmimage", "phase"],
)
IMAGE_BUILD_SECONDS = Histogram(
    "glmops_glmimage_build_duration_seconds",
    "Time from a GLMImage's build Job being created to its outcome, by result (succeeded, failed).",
    ["result"],
    buckets=(60, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200, 10800),
)
IMAGE_PHASES = tuple(ImagePhase)
WEBHOOK_SECONDS = Histogram(
    "glmops_webhook_request_duration_seconds",
    "Time the admission handler took to answer a well-formed AdmissionReview, by webhook (the path's id) and result "
    "(ok; error: it raised and the API server got a 400).",
    ["webhook", "result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
# A finding's severity, as the outcome a person sees at admission.
FINDING_OUTCOMES = {"error": "refused", "warning": "warned", "remediated": "repaired"}

# Which per-unit gauge carries each check's value; a check not named here has only its pass/fail gauge.
CORRECT_CHECKS = frozenset({"gsm8k", "smoke", "copy"})
SINGLE_UNIT = {"null-content": CANARY_NULL_CONTENT, "spec-decode": CANARY_ACCEPTANCE, "logprob": CANARY_NLL}
LABELLED: tuple[tuple[Counter | Gauge, tuple[str, ...]], ...] = (
    (CANARY_RUNS, (*DEPLOYMENT, "result")),
    (CANARY_CHECK, (*DEPLOYMENT, "check")),
    (CANARY_CHECK_PASSED, (*PER_POD, "check")),
    (CANARY_CORRECT, (*PER_POD, "check")),
    (CANARY_CORRECT_INTERVAL, (*PER_POD, "check", "bound")),
    (CANARY_GATE, PER_POD),
    (CANARY_NULL_CONTENT, PER_POD),
    (CANARY_ACCEPTANCE, PER_POD),
    (CANARY_NLL, PER_POD),
    (CANARY_QUESTIONS_ASKED, (*PER_POD, "check")),
    (CANARY_RUNNING_CORRECT, (*PER_POD, "check")),
    (CONDITION, (*DEPLOYMENT, "type", "status")),
    (REPLICAS_DESIRED, DEPLOYMENT),
    (REPLICAS_READY, DEPLOYMENT),
    (IMAGE_BUILD_PHASE, ("glmimage", "phase")),
)


def operator_version() -> str:
    try:
        return version("glm-operator")
    except PackageNotFoundError:
        return "unknown"


BUILD_INFO.labels(operator_version()).set(1)


def record_suite(namespace: str, name: str, pod: str, result: SuiteResult) -> None:
    CANARY_RUNS.labels(namespace, name, "pass" if result.passed else "fail").inc()
    for check in result.checks:
        CANARY_CHECK_PASSED.labels(namespace, name, pod, check.name).set(1 if check.passed else 0)
        if check.value is None:
            continue
        CANARY_CHECK.labels(namespace, name, check.name).set(check.value)
        if check.name in CORRECT_CHECKS:
            CANARY_CORRECT.labels(namespace, name, pod, check.name).set(check.value)
            if (interval := check.interval()) is not None:
                for bound, value in zip(("lower", "upper"), interval, strict=True):
                    CANARY_CORRECT_INTERVAL.labels(namespace, name, pod, check.name, bound).set(value)
        elif check.name in SINGLE_UNIT:
            SINGLE_UNIT[check.name].labels(namespace, name, pod).set(check.value)


def start_run(namespace: str, name: str, pod: str) -> None:
    """A new canary run on the pod: the figures of its last run go (a check it no longer runs leaves none behind)."""
    _forget({"namespace": namespace, "glmdeployment": name, "pod": pod}, RUNNING)


def record_progress(namespace: str, name: str, pod: str, figures: CheckProgress) -> None:
    """One check's figures so far in the pod's run (a check that asks no scored questions has none)."""
    if not figures.planned:
        return
    CANARY_QUESTIONS_ASKED.labels(namespace, name, pod, figures.check).set(figures.asked)
    if figures.ratio is not None:
        CANARY_RUNNING_CORRECT.labels(namespace, name, pod, figures.check).set(figures.ratio)


def record_gate(namespace: str, name: str, pod: str, status: str | None) -> None:
    """A serving pod's canary gate as last watched ("True", "False"; None: not written yet, nothing recorded)."""
    if status in ("True", "False"):
        CANARY_GATE.labels(namespace, name, pod).set(1 if status == "True" else 0)


def record_deployment(body: Mapping[str, Any]) -> None:
    """Condition and replica gauges from a GLMDeployment as last watched."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    spec, status = body.get("spec") or {}, body.get("status") or {}
    REPLICAS_DESIRED.labels(namespace, name).set(int(1 if spec.get("replicas") is None else spec["replicas"]))
    REPLICAS_READY.labels(namespace, name).set(int(status.get("readyReplicas") or 0))
    for condition in status.get("conditions") or ():
        kind, now = str(condition.get("type", "")), str(condition.get("status", "Unknown"))
        for each in CONDITION_STATUSES:
            CONDITION.labels(namespace, name, kind, each).set(1 if now == each else 0)


def record_image(body: Mapping[str, Any]) -> None:
    """The build phase gauge of a GLMImage as last watched (no phase yet: Pending)."""
    name = str((body.get("metadata") or {}).get("name", ""))
    now = str((body.get("status") or {}).get("phase") or "Pending")
    for phase in IMAGE_PHASES:
        IMAGE_BUILD_PHASE.labels(name, phase).set(1 if now == phase else 0)


def record_build_finished(body: Mapping[str, Any], status: Mapping[str, Any], now: float | None = None) -> None:
    """A build's duration once `status` (what the follow-up writes) ends it: since the Job was created, when the
    Built condition of `body` (the GLMImage before the write) turned to reason Building."""
    phase = status.get("phase")
    if phase not in (ImagePhase.SUCCEEDED, ImagePhase.FAILED):
        return
    conditions = (body.get("status") or {}).get("conditions") or ()
    built = next(
        (
            c
            for c in conditions
            if c.get("type") == ImageConditionType.BUILT and c.get("reason") == ImageReason.BUILDING
        ),
        None,
    )
    if built is None or not built.get("lastTransitionTime"):
        return
    start = datetime.fromisoformat(str(built["lastTransitionTime"]).replace("Z", "+00:00")).timestamp()
    elapsed = (time.time() if now is None else now) - start
    IMAGE_BUILD_SECONDS.labels(str(phase).lower()).observe(max(elapsed, 0.0))


def forget_image(name: str) -> None:
    _forget({"glmimage": name})


def record_admission(webhook: str, allowed: bool, findings: Iterable[tuple[str, str]]) -> None:
    """One admission review: its outcome, and each (rule, severity) finding it reported."""
    ADMISSION_REVIEWS.labels(webhook, "allowed" if allowed else "refused").inc()
    for rule, severity in findings:
        ADMISSION_FINDINGS.labels(rule, FINDING_OUTCOMES.get(severity, severity)).inc()


@contextmanager
def timed(histogram: Histogram, ok: str = "ok") -> Iterator[dict[str, str]]:
    """Observe the block's duration under label `result`: `ok` unless the block sets another or raises ("error")."""
    outcome = {"result": ok}
    start = time.monotonic()
    try:
        yield outcome
    except BaseException:
        outcome["result"] = "error"
        raise
    finally:
        histogram.labels(outcome["result"]).observe(time.monotonic() - start)


def record_unreachable(namespace: str, name: str) -> None:
    """A canary attempt that could not ask a pod at all (counted once the gate reports it)."""
    CANARY_RUNS.labels(namespace, name, "unreachable").inc()


def _forget(match: dict[str, str], only: Iterable[Counter | Gauge] | None = None) -> None:
    """Remove every series whose labels include `match` (a deleted GLMDeployment's or pod's), of `only` if given."""
    kept = None if only is None else set(only)
    for metric, labelnames in LABELLED:
        if not set(match) <= set(labelnames) or (kept is not None and metric not in kept):
            continue
        seen: set[tuple[str, ...]] = set()
        for family in metric.collect():
            for sample in family.samples:
                if all(sample.labels.get(k) == v for k, v in match.items()):
                    seen.add(tuple(sample.labels[k] for k in labelnames))
        for values in seen:
            metric.remove(*values)


def forget_deployment(namespace: str, name: str) -> None:
    _forget({"namespace": namespace, "glmdeployment": name})


def forget_pod(namespace: str, pod: str) -> None:
    _forget({"namespace": namespace, "pod": pod})


def serve_metrics(port: int) -> None:
    start_http_server(port)
