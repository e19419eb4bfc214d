"""The Grafana dashboard (glm_operator/render/dashboard.py): every query parses, as Prometheus' own parser and a port
of its grammar read it, and names only metrics that exist: the operator's (its prometheus_client registry), the
plugin's, the recording rules', and vLLM's as every supported version declares them (fact `prometheus-metrics`).
The chart ships it as a ConfigMap for Grafana's sidecar, switched by `monitoring.dashboards.enabled`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from glm_operator.catalog.images import load_images
from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import PROMETHEUS_METRICS, served_metric_names
from glm_operator.k8s import metrics
from glm_operator.render import dashboard
from glm_operator.render.alerts import RECORD_WINDOW, RECORDED, RECORDINGS
from tests.support import promql
from tests.unit.test_alerts import CHART, _objects, _template

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
QUERIES = list(dashboard.panel_queries())


def _operator_metrics() -> set[str]:
    """Every series name the operator serves, from its registry's own descriptions."""
    out: set[str] = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                out.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return out


def _plugin_metrics() -> set[str]:
    from glmops_vllm_patches import patch_null_content_metrics as plugin

    return {plugin.COMPLETIONS + "_total", plugin.NULL_CONTENT + "_total"}


def _vllm_metrics() -> set[str]:
    """vLLM's series names served by every supported version (a panel must work on each)."""
    versions = load_images().versions
    return set.intersection(*(set(served_metric_names(Version.parse(v))) for v in versions))


KNOWN = _operator_metrics() | _plugin_metrics() | set(RECORDED) | _vllm_metrics()


def _unknown(exprs: list[str]) -> dict[str, set[str]]:
    return {e: names - KNOWN for e in exprs if (names := promql.metric_names(e)) - KNOWN}


def test_the_dashboard_has_five_rows_of_panels_each_with_a_query_and_a_description() -> None:
    board = json.loads(dashboard.render_dashboard_json())
    rows = [p for p in board["panels"] if p["type"] == "row"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert [r["title"] for r in rows] == [r.title for r in dashboard.ROWS] and len(rows) == 5
    assert len(panels) >= 18
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for panel in panels:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        assert panel["description"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "namespace", "deployment", "pod"]


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[f"{t}-{i}" for i, (t, _e) in enumerate(QUERIES)])
def test_every_query_parses_and_names_only_metrics_that_exist(title: str, expr: str) -> None:
    names = promql.metric_names(expr)
    assert names, f"{title}: {expr!r} selects no metric"
    assert names <= KNOWN, f"{title}: {sorted(names - KNOWN)} exist nowhere (operator, plugin, recording rules, vLLM)"


def test_prometheus_own_parser_accepts_every_query(tmp_path: Path) -> None:
    try:
        rejected = promql.promtool_rejections([e for _t, e in QUERIES], tmp_path)
    except LookupError as err:
        pytest.skip(str(err))
    assert rejected is None, rejected


def test_the_checks_fail_on_a_misspelt_metric_and_on_a_query_that_does_not_parse(tmp_path: Path) -> None:
    misspelt = 'sum(rate(vllm:time_to_first_token_second_bucket{pod=~"$pod"}[$__rate_interval]))'
    assert _unknown([misspelt]) == {misspelt: {"vllm:time_to_first_token_second_bucket"}}
    assert _unknown(['{__name__="glmops_build_info"}']) == {}
    with pytest.raises(ValueError, match="without a metric name"):
        promql.metric_names('{__name__=~"glmops_.+"}')
    with pytest.raises(ValueError):
        promql.metric_names("sum(rate(glmops_canary_runs_total[$__rate_interval])")
    try:
        assert promql.promtool_rejections(["sum(rate(x[5m])"], tmp_path) is not None
    except LookupError as err:
        pytest.skip(str(err))


def test_the_vllm_names_of_the_fact_are_the_ones_glmops_reads() -> None:
    """Every vLLM metric of the fact is read by a panel or a recording rule: the fact lists no metric for nothing."""
    read = {n for _t, e in QUERIES for n in promql.metric_names(e)} | {
        n for r in RECORDINGS for n in promql.metric_names(r.expr.replace(RECORD_WINDOW, "10m"))
    }
    for declared in PROMETHEUS_METRICS.at(None):
        name, kind = declared.removesuffix(")").split(" (")
        assert any(name + suffix in read for suffix in SUFFIXES[kind]), f"{declared}: read by no panel or rule"


@pytest.mark.parametrize("variable", dashboard.VARIABLES, ids=lambda v: v.name)
def test_each_variable_reads_label_values_of_a_metric_that_exists(variable: dashboard.VariableSpec) -> None:
    selector, label = promql.label_values_selector(variable.query)
    assert promql.metric_names(selector) <= KNOWN
    assert label in {"namespace", "glmdeployment", "pod"}


# What issue 33 asks the dashboard to show, each as the metrics a panel must read for it.
COVERED = {
    "draft acceptance per deployment and pod": {
        "namespace_glmdeployment_model_name_pod:vllm_spec_decode_draft_acceptance:ratio_rate"
    },
    "per-position acceptance": {
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:spec_decode_num_drafts_total",
    },
    "null-content share of real traffic": {
        "namespace_glmdeployment_model_name_pod:glmops_chat_null_content:ratio_rate"
    },
    "GSM8K accuracy with its interval": {"glmops_canary_correct_ratio", "glmops_canary_correct_interval_ratio"},
    "copy and smoke verdicts": {"glmops_canary_check_passed"},
    "gate state": {"glmops_canary_gate_open"},
    "ready versus desired replicas": {"glmops_glmdeployment_replicas_ready", "glmops_glmdeployment_replicas_desired"},
    "admission refusals and repairs by rule": {"glmops_admission_findings_total"},
    "image build phases": {"glmops_glmimage_build_phase"},
    "image build times": {"glmops_glmimage_build_duration_seconds_bucket"},
    "TTFT percentiles": {"vllm:time_to_first_token_seconds_bucket"},
    "inter-token latency percentiles": {"vllm:inter_token_latency_seconds_bucket"},
    "queue length": {"vllm:num_requests_waiting"},
    "KV-cache use": {"vllm:kv_cache_usage_perc"},
    "preemptions": {"vllm:num_preemptions_total"},
}


@pytest.mark.parametrize("item", sorted(COVERED))
def test_a_panel_shows(item: str) -> None:
    per_panel: dict[str, set[str]] = {}
    for title, expr in QUERIES:
        per_panel.setdefault(title, set()).update(promql.metric_names(expr))
    assert any(COVERED[item] <= names for names in per_panel.values()), f"no panel reads {sorted(COVERED[item])}"


def test_panels_of_a_deployment_follow_the_namespace_deployment_and_pod_variables() -> None:
    for title, expr in QUERIES:
        if "glmdeployment" in expr or "pod" in expr:
            if "admission" in expr or "glmimage" in expr:
                continue
            assert 'namespace=~"$namespace"' in expr and 'glmdeployment=~"$deployment"' in expr, title


# --- the chart ------------------------------------------------------------------------------------------------------


def _configmap(objects: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return objects.get("ConfigMap/glmops-dashboard")


def test_the_chart_ships_the_dashboard_only_when_switched_on(helm: str) -> None:
    assert _configmap(_objects(helm)) is None
    shipped = _configmap(_objects(helm, "monitoring.dashboards.enabled=true"))
    assert shipped is not None
    assert shipped["metadata"]["namespace"] == "glmops-system"
    assert shipped["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(shipped["data"]["glmops.json"]) == json.loads((CHART / "files/dashboard.json").read_text())


def test_the_dashboards_labels_annotations_and_namespace_come_from_values(helm: str) -> None:
    shipped = _configmap(
        _objects(
            helm,
            "monitoring.dashboards.enabled=true",
            "monitoring.dashboards.labels.grafana_dashboard=null",
            "monitoring.dashboards.labels.team-dashboards=glm",
            "monitoring.dashboards.annotations.grafana_folder=glmops",
            "monitoring.dashboards.namespace=monitoring",
        )
    )
    assert shipped is not None
    assert shipped["metadata"]["namespace"] == "monitoring"
    assert shipped["metadata"]["labels"]["team-dashboards"] == "glm"
    assert "grafana_dashboard" not in shipped["metadata"]["labels"]
    assert shipped["metadata"]["annotations"] == {"grafana_folder": "glmops"}


def test_the_schema_refuses_a_label_that_is_not_a_string(helm: str) -> None:
    proc = _template(helm, "monitoring.dashboards.enabled=true", "monitoring.dashboards.labels.x=1", check=False)
    assert proc.returncode != 0 and "/monitoring/dashboards/labels/x" in proc.stderr, proc.stderr


def test_the_committed_json_is_the_dashboard_the_code_builds() -> None:
    assert (CHART / "files/dashboard.json").read_text() == dashboard.render_dashboard_json(), "run glmctl generate"
