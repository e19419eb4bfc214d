"""The operator's metrics: one unit per metric, a pod label on per-pod series, series gone with their object, and an
exposition that `promtool check metrics` accepts; the plugin's counters likewise, but for their deprecated names."""

from __future__ import annotations

import asyncio
import datetime
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Metric, generate_latest

from glm_operator.canary.progress import CheckProgress
from glm_operator.canary.results import CheckResult, SuiteResult
from glm_operator.k8s import metrics


def _promtool(text: bytes) -> subprocess.CompletedProcess[bytes]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)


def _suite() -> SuiteResult:
    return SuiteResult(
        checks=[
            CheckResult("gsm8k", True, 0.94, 0.85, "ok"),
            CheckResult("null-content", False, 0.89, 0.05, "1178/1319 empty"),
            CheckResult("spec-decode", False, 0.0, 0.3, "0/378 draft tokens accepted"),
            CheckResult("logprob", True, 1.7, 2.5, "ok"),
        ]
    )


def _value(name: str, labels: dict[str, str]) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_each_unit_has_its_own_metric_with_a_pod_label() -> None:
    metrics.record_suite("ns-u", "glm", "glm-0", _suite())
    pod = {"namespace": "ns-u", "glmdeployment": "glm", "pod": "glm-0"}
    assert _value("glmops_canary_correct_ratio", {**pod, "check": "gsm8k"}) == 0.94
    assert _value("glmops_canary_null_content_ratio", pod) == 0.89
    assert _value("glmops_canary_draft_acceptance_ratio", pod) == 0.0
    assert _value("glmops_canary_prompt_negative_log_likelihood", pod) == 1.7
    assert _value("glmops_canary_check_passed", {**pod, "check": "null-content"}) == 0
    # the deprecated mixed gauge is still written for one release
    assert _value("glmops_canary_check_value", {"namespace": "ns-u", "glmdeployment": "glm", "check": "logprob"}) == 1.7
    assert _value("glmops_canary_runs_total", {"namespace": "ns-u", "glmdeployment": "glm", "result": "fail"}) == 1
    assert _value("glmops_canary_null_content_ratio", {**pod, "pod": "other"}) is None


def test_series_go_with_their_pod_then_their_deployment() -> None:
    metrics.record_suite("ns-f", "glm", "glm-0", _suite())
    metrics.record_suite("ns-f", "glm", "glm-1", _suite())
    metrics.record_suite("ns-f", "keep", "keep-0", _suite())
    metrics.forget_pod("ns-f", "glm-0")
    gone = {"namespace": "ns-f", "glmdeployment": "glm", "pod": "glm-0"}
    assert _value("glmops_canary_null_content_ratio", gone) is None
    assert _value("glmops_canary_null_content_ratio", {**gone, "pod": "glm-1"}) == 0.89
    metrics.forget_deployment("ns-f", "glm")
    assert _value("glmops_canary_null_content_ratio", {**gone, "pod": "glm-1"}) is None
    assert _value("glmops_canary_runs_total", {"namespace": "ns-f", "glmdeployment": "glm", "result": "fail"}) is None
    assert _value("glmops_canary_check_value", {"namespace": "ns-f", "glmdeployment": "glm", "check": "gsm8k"}) is None
    kept = {"namespace": "ns-f", "glmdeployment": "keep", "pod": "keep-0"}
    assert _value("glmops_canary_null_content_ratio", kept) == 0.89


def test_conditions_and_replicas_follow_the_deployment_and_go_with_it() -> None:
    body = {
        "metadata": {"namespace": "ns-c", "name": "glm"},
        "spec": {"replicas": 3},
        "status": {"readyReplicas": 1, "conditions": [{"type": "Ready", "status": "False"}]},
    }
    metrics.record_deployment(body)
    glmd = {"namespace": "ns-c", "glmdeployment": "glm"}
    assert _value("glmops_glmdeployment_replicas_desired", glmd) == 3
    assert _value("glmops_glmdeployment_replicas_ready", glmd) == 1
    assert _value("glmops_glmdeployment_condition", {**glmd, "type": "Ready", "status": "False"}) == 1
    assert _value("glmops_glmdeployment_condition", {**glmd, "type": "Ready", "status": "True"}) == 0
    body["status"] = {"readyReplicas": 3, "conditions": [{"type": "Ready", "status": "True"}]}
    metrics.record_deployment(body)
    assert _value("glmops_glmdeployment_condition", {**glmd, "type": "Ready", "status": "False"}) == 0
    assert _value("glmops_glmdeployment_condition", {**glmd, "type": "Ready", "status": "True"}) == 1
    assert _value("glmops_glmdeployment_replicas_ready", glmd) == 3
    metrics.forget_deployment("ns-c", "glm")
    assert _value("glmops_glmdeployment_replicas_desired", glmd) is None
    assert _value("glmops_glmdeployment_condition", {**glmd, "type": "Ready", "status": "True"}) is None


def test_admission_counts_reviews_and_findings_by_rule_and_outcome() -> None:
    refused = {"webhook": "validate", "outcome": "refused"}
    finding = {"rule": "test-rule-x", "outcome": "refused"}
    before = _value("glmops_admission_reviews_total", refused) or 0
    metrics.record_admission("validate", False, [("test-rule-x", "error"), ("test-rule-y", "warning")])
    assert _value("glmops_admission_reviews_total", refused) == before + 1
    assert _value("glmops_admission_findings_total", finding) == 1
    assert _value("glmops_admission_findings_total", {"rule": "test-rule-y", "outcome": "warned"}) == 1
    metrics.record_admission("repair", True, [("test-rule-z", "remediated")])
    assert _value("glmops_admission_findings_total", {"rule": "test-rule-z", "outcome": "repaired"}) == 1


def test_timed_observes_the_result_the_block_sets_or_error() -> None:
    histogram = metrics.CANARY_SECONDS

    def count(result: str) -> float:
        return _value("glmops_canary_run_duration_seconds_count", {"result": result}) or 0

    passed, failed, errors = count("pass"), count("fail"), count("error")
    with metrics.timed(histogram) as run:
        run["result"] = "pass"
    with pytest.raises(RuntimeError), metrics.timed(histogram) as run:
        run["result"] = "fail"
        raise RuntimeError("pod went away")
    assert (count("pass"), count("fail"), count("error")) == (passed + 1, failed, errors + 1)


def test_the_served_webhook_certificates_expiry_is_exported() -> None:
    from glm_operator.k8s.webhooks import SecretWebhookServer
    from glm_operator.render.webhook_certs import generate, not_after

    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    certs = generate(["glmops.glmops.svc"], now)
    server = SecretWebhookServer(source=cast(Any, None), resync_seconds=60, readiness_port=None)
    assert server.load(certs)
    expires = not_after(certs.tls_cert)
    assert expires > now
    assert _value("glmops_webhook_certificate_expiry_timestamp_seconds", {}) == expires.timestamp()


def test_build_info_names_the_version() -> None:
    assert _value("glmops_build_info", {"version": metrics.operator_version()}) == 1


def test_promtool_accepts_the_exposition() -> None:
    metrics.record_suite("ns-p", "glm", "glm-0", _suite())
    metrics.record_unreachable("ns-p", "glm")
    metrics.record_progress("ns-p", "glm", "glm-0", CheckProgress("gsm8k", 3, 200, 2))
    metrics.record_deployment({"metadata": {"namespace": "ns-p", "name": "glm"}, "status": {"conditions": []}})
    metrics.record_admission("validate", False, [("test-rule-p", "error")])
    with metrics.timed(metrics.RECONCILE_SECONDS):
        pass
    text = generate_latest(REGISTRY)
    for name in (
        b"glmops_canary_draft_acceptance_ratio",
        b"glmops_canary_running_correct_ratio",
        b"glmops_reconcile_duration_seconds_bucket",
        b"admission",
    ):
        assert name in text
    checked = _promtool(text)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_promtool_accepts_the_plugins_counters_and_refuses_only_their_deprecated_names() -> None:
    from glmops_vllm_patches import patch_null_content_metrics as plugin

    plugin.record("promtool", True)
    families = {plugin.COMPLETIONS, plugin.NULL_CONTENT}
    current = generate_latest(RestrictedRegistry(REGISTRY, families))
    assert b'glmops_chat_null_content_total{model_name="promtool"} 1.0' in current
    checked = _promtool(current)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    deprecated = _promtool(generate_latest(RestrictedRegistry(REGISTRY, set(plugin.DEPRECATED.values()))))
    complaints = (deprecated.stdout + deprecated.stderr).decode()
    assert deprecated.returncode != 0 and "should not contain ':'" in complaints, complaints


class RestrictedRegistry:
    """The families of `registry` named in `names` (what one exporter's scrape would show)."""

    def __init__(self, registry: CollectorRegistry, names: set[str]) -> None:
        self.registry, self.names = registry, names

    def collect(self) -> Iterator[Metric]:
        return (family for family in self.registry.collect() if family.name in self.names)


def _image(name: str, phase: str | None, building_since: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if building_since:
        status["conditions"] = [
            {"type": "Built", "status": "False", "reason": "Building", "lastTransitionTime": building_since}
        ]
    return {"metadata": {"name": name}, "spec": {"image": "registry.test/vllm:x"}, "status": status}


def test_image_build_phase_follows_the_glmimage_and_goes_with_it() -> None:
    from glm_operator.handlers.glmimage import wake_users

    def phases(name: str) -> dict[str, float | None]:
        return {p: _value("glmops_glmimage_build_phase", {"glmimage": name, "phase": p}) for p in metrics.IMAGE_PHASES}

    asyncio.run(wake_users(_image("img-p", None), logger=None, memo=None, image_users={}))  # type: ignore[arg-type]
    assert phases("img-p") == {"Pending": 1, "Building": 0, "Succeeded": 0, "Failed": 0}
    asyncio.run(wake_users(_image("img-p", "Failed"), logger=None, memo=None, image_users={}, type="MODIFIED"))  # type: ignore[arg-type]
    assert phases("img-p") == {"Pending": 0, "Building": 0, "Succeeded": 0, "Failed": 1}
    metrics.record_image(_image("img-keep", "Building"))
    asyncio.run(wake_users(_image("img-p", "Failed"), logger=None, memo=None, image_users={}, type="DELETED"))  # type: ignore[arg-type]
    assert set(phases("img-p").values()) == {None}
    assert _value("glmops_glmimage_build_phase", {"glmimage": "img-keep", "phase": "Building"}) == 1


def test_build_duration_is_observed_once_the_build_ends_by_result() -> None:
    def count(result: str) -> float:
        return _value("glmops_glmimage_build_duration_seconds_count", {"result": result}) or 0.0

    def total(result: str) -> float:
        return _value("glmops_glmimage_build_duration_seconds_sum", {"result": result}) or 0.0

    start = datetime.datetime(2026, 12, 3, 8, 0, tzinfo=datetime.UTC)
    body = _image("img-d", "Building", "2026-12-03T08:00:00Z")
    before = {r: (count(r), total(r)) for r in ("succeeded", "failed")}
    metrics.record_build_finished(body, {}, now=start.timestamp() + 60)  # still running: nothing
    metrics.record_build_finished(body, {"phase": "Succeeded"}, now=start.timestamp() + 1500)
    assert (count("succeeded"), total("succeeded")) == (before["succeeded"][0] + 1, before["succeeded"][1] + 1500)
    metrics.record_build_finished(body, {"phase": "Failed"}, now=start.timestamp() + 7200)
    assert (count("failed"), total("failed")) == (before["failed"][0] + 1, before["failed"][1] + 7200)
    # a GLMImage found already built in the registry never ran a build: no duration
    metrics.record_build_finished(_image("img-r", None), {"phase": "Succeeded"}, now=start.timestamp())
    assert count("succeeded") == before["succeeded"][0] + 1


def _documented() -> tuple[dict[str, tuple[str, tuple[str, ...]]], str]:
    """docs/alerts.md's table of the operator's metrics (name: type, labels), and the text after it."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    section = docs.split("\n## Metrics\n", 1)[1]
    table, rest = section.split("\n\n", 2)[1], section.split("\n\n", 2)[2]
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for row in table.splitlines()[2:]:
        name, kind, labels, _ = (cell.strip() for cell in row.strip("|").split(" | "))
        names = re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", labels))
        rows[name.strip("`")] = (kind, tuple(names))
    return rows, rest


def test_the_docs_metrics_table_names_every_operator_metric_with_its_type_and_labels() -> None:
    rows, rest = _documented()
    served: dict[str, tuple[str, tuple[str, ...]]] = {}
    for metric in vars(metrics).values():
        if isinstance(metric, Counter | Gauge | Histogram):
            family = metric.describe()[0]
            name = family.name + ("_total" if family.type == "counter" else "")
            served[name] = (family.type, tuple(metric._labelnames))
    deprecated = {n: v for n, v in served.items() if f"`{n}{{{', '.join(v[1])}}}`" in rest and "Deprecated" in rest}
    assert deprecated == {"glmops_canary_check_value": ("gauge", ("namespace", "glmdeployment", "check"))}
    undocumented = sorted(set(served) - set(rows) - set(deprecated))
    assert not undocumented, f"add a row to docs/alerts.md, Metrics: {undocumented}"
    assert not sorted(set(rows) - set(served)), "docs/alerts.md lists metrics the operator does not serve"
    wrong = {n: (rows[n], served[n]) for n in rows if rows[n] != served[n]}
    assert not wrong, f"type or labels differ, docs against the operator: {wrong}"
