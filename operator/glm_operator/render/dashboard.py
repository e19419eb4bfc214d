"""glmops' Grafana dashboard, built as code with grafana-foundation-sdk (Grafana's own dashboards-as-code library).

`glmctl generate` writes it to `charts/glmops/files/dashboard.json`, which the chart ships as a ConfigMap for
Grafana's dashboard sidecar (`monitoring.dashboards`) and which Grafana imports as it is. The panels read the
operator's metrics (k8s/metrics.py), the plugin's counters (`glmops_chat_*`), the recording rules of
render/alerts.py (the same ratios under the same names) and vLLM's own metrics as each supported version names them
(catalog fact `prometheus-metrics`); `tests/unit/test_dashboard.py` parses every query and checks each name.

The SDK is a development dependency only (pyproject's `dev` extra): nothing the operator runs imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from grafana_foundation_sdk.builders import common, prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as gm

from glm_operator.render.alerts import POD_ACCEPTANCE_RATIO, POD_COMPLETIONS_RATE, POD_NULL_CONTENT_RATIO

UID = "glmops-overview"
TITLE = "glmops"
DATASOURCE = gm.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Every template variable, as Grafana substitutes it: multi-valued with All as `.*`, so every selector matches with =~.
DEPLOYMENT = 'namespace=~"$namespace", glmdeployment=~"$deployment"'
POD = f'{DEPLOYMENT}, pod=~"$pod"'
RATE = "$__rate_interval"
QUANTILES = (0.5, 0.9, 0.99)

Kind = Literal["timeseries", "state", "stat"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: Kind = "timeseries"
    span: int = 8
    min: float | None = None
    max: float | None = None
    # A state timeline's colours for 0 and for 1 (a verdict: red, green; a condition that holds: blue).
    states: tuple[str, str] = ("red", "green")


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...]


@dataclass(frozen=True)
class VariableSpec:
    name: str
    label: str
    query: str  # Grafana's `label_values(<selector>, <label>)`


def _q(expr: str, legend: str) -> Query:
    return Query(expr, legend)


def _quantiles(metric: str) -> tuple[Query, ...]:
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by (namespace, glmdeployment, le) (rate({metric}_bucket{{{POD}}}[{RATE}])))",
            f"{{{{glmdeployment}}}} p{round(q * 100)}",
        )
        for q in QUANTILES
    )


OVERVIEW = RowSpec(
    "Deployment overview",
    (
        PanelSpec(
            "Ready and desired replicas",
            "Serving replicas ready (status.readyReplicas) against those asked for (spec.replicas). A pod held out "
            "by the canary gate counts as not ready.",
            (
                _q(
                    f"max by (namespace, glmdeployment) (glmops_glmdeployment_replicas_ready{{{DEPLOYMENT}}})",
                    "{{glmdeployment}} ready",
                ),
                _q(
                    f"max by (namespace, glmdeployment) (glmops_glmdeployment_replicas_desired{{{DEPLOYMENT}}})",
                    "{{glmdeployment}} desired",
                ),
            ),
            min=0,
        ),
        PanelSpec(
            "Conditions True",
            "Each condition of the GLMDeployment that is True now (Ready, Progressing, Degraded, ImageBuilding...).",
            (
                _q(
                    "max by (namespace, glmdeployment, type) "
                    f'(glmops_glmdeployment_condition{{{DEPLOYMENT}, status="True"}})',
                    "{{glmdeployment}} {{type}}",
                ),
            ),
            kind="state",
            states=("transparent", "blue"),
        ),
        PanelSpec(
            "Chat completions per second",
            "Finished chat completion choices per pod over the recording window (the plugin's counter).",
            (_q(f"sum by (namespace, glmdeployment, pod) ({POD_COMPLETIONS_RATE}{{{POD}}})", "{{pod}}"),),
            unit="reqps",
            min=0,
        ),
    ),
)

CANARY = RowSpec(
    "Canary",
    (
        PanelSpec(
            "GSM8K accuracy with its 95 % interval",
            "Share of GSM8K answers right in the last canary run per pod, with the Wilson interval of that share "
            "from the number of questions asked (a run the SPRT decides early asks fewer, so its interval is wider).",
            (
                _q(
                    f'max by (namespace, glmdeployment, pod) (glmops_canary_correct_ratio{{{POD}, check="gsm8k"}})',
                    "{{pod}}",
                ),
                _q(
                    f"max by (namespace, glmdeployment, pod, bound) "
                    f'(glmops_canary_correct_interval_ratio{{{POD}, check="gsm8k"}})',
                    "{{pod}} {{bound}}",
                ),
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        PanelSpec(
            "Copy and smoke",
            "Share of exact copies (copy) and right smoke answers (smoke) in the last canary run per pod.",
            (
                _q(
                    "max by (namespace, glmdeployment, pod, check) "
                    f'(glmops_canary_correct_ratio{{{POD}, check=~"copy|smoke"}})',
                    "{{pod}} {{check}}",
                ),
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        PanelSpec(
            "Check verdicts",
            "1 when the check's last run on the pod passed, 0 when it failed.",
            (_q(f"max by (pod, check) (glmops_canary_check_passed{{{POD}}})", "{{pod}} {{check}}"),),
            kind="state",
        ),
        PanelSpec(
            "Canary gate",
            "The pod's readiness gate glmops.dev/canary: 1 (open, the pod may serve), 0 (held out of the Service).",
            (_q(f"max by (pod) (glmops_canary_gate_open{{{POD}}})", "{{pod}}"),),
            kind="state",
        ),
        PanelSpec(
            "Canary runs",
            "Canary runs per deployment by result: pass, fail, unreachable (the pod could not be asked).",
            (
                _q(
                    f"sum by (glmdeployment, result) (increase(glmops_canary_runs_total{{{DEPLOYMENT}}}[{RATE}]))",
                    "{{glmdeployment}} {{result}}",
                ),
            ),
            min=0,
        ),
    ),
)

SPEC_DECODE = RowSpec(
    "Speculative decoding and answers",
    (
        PanelSpec(
            "Draft acceptance",
            "Share of draft tokens accepted: real traffic per pod over the recording window, and during the "
            "canary's last run. 0 % is the vllm-52833 signature.",
            (
                _q(f"sum by (namespace, glmdeployment, pod) ({POD_ACCEPTANCE_RATIO}{{{POD}}})", "{{pod}} traffic"),
                _q(
                    f"max by (namespace, glmdeployment, pod) (glmops_canary_draft_acceptance_ratio{{{POD}}})",
                    "{{pod}} canary",
                ),
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        PanelSpec(
            "Acceptance per draft position",
            "Accepted tokens at each draft position per draft made: position 0 is how often the first draft token "
            "is right; later positions are lower.",
            (
                _q(
                    "sum by (pod, position) "
                    f"(rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{{{POD}}}[{RATE}]))\n"
                    "/ on (pod) group_left\n"
                    f"sum by (pod) (rate(vllm:spec_decode_num_drafts_total{{{POD}}}[{RATE}]))",
                    "{{pod}} position {{position}}",
                ),
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
        PanelSpec(
            "Null-content share of real traffic",
            "Share of chat answers with reasoning but empty content, per pod, from real traffic over the recording "
            "window (the plugin's counters) and in the canary's last run. vllm-58729 looks like this.",
            (
                _q(f"sum by (namespace, glmdeployment, pod) ({POD_NULL_CONTENT_RATIO}{{{POD}}})", "{{pod}} traffic"),
                _q(
                    f"max by (namespace, glmdeployment, pod) (glmops_canary_null_content_ratio{{{POD}}})",
                    "{{pod}} canary",
                ),
            ),
            unit="percentunit",
            min=0,
            max=1,
        ),
    ),
)

ADMISSION = RowSpec(
    "Admission and image builds",
    (
        PanelSpec(
            "Admission refusals and repairs by rule",
            "Rule findings at admission per rule: refused (an error; the object was not admitted) and repaired "
            "(an Auto remedy filled a setting).",
            (
                _q(
                    'sum by (rule, outcome) (increase(glmops_admission_findings_total{outcome=~"refused|repaired"}'
                    f"[{RATE}]))",
                    "{{rule}} {{outcome}}",
                ),
            ),
            min=0,
        ),
        PanelSpec(
            "Image builds in progress and failed",
            "GLMImages per build phase now (Pending, Building, Succeeded, Failed).",
            (_q("sum by (phase) (glmops_glmimage_build_phase)", "{{phase}}"),),
            kind="stat",
        ),
        PanelSpec(
            "Image build time",
            "Time from a build Job's creation to its outcome, by result, and builds finished.",
            (
                _q(
                    "histogram_quantile(0.9, sum by (result, le) "
                    f"(rate(glmops_glmimage_build_duration_seconds_bucket[{RATE}])))",
                    "p90 {{result}}",
                ),
                _q(
                    f"sum by (result) (increase(glmops_glmimage_build_duration_seconds_count[{RATE}]))",
                    "finished {{result}}",
                ),
            ),
            unit="s",
            min=0,
        ),
    ),
)

SERVING = RowSpec(
    "vLLM serving",
    (
        PanelSpec(
            "Time to first token",
            "vLLM's time to first token, per deployment, at the 50th, 90th and 99th percentile.",
            _quantiles("vllm:time_to_first_token_seconds"),
            unit="s",
            min=0,
        ),
        PanelSpec(
            "Inter-token latency",
            "vLLM's time between two output tokens of a request, at the 50th, 90th and 99th percentile.",
            _quantiles("vllm:inter_token_latency_seconds"),
            unit="s",
            min=0,
        ),
        PanelSpec(
            "Requests waiting and running",
            "Requests in vLLM's queue (waiting) and in its running batch, per pod.",
            (
                _q(f"sum by (pod) (vllm:num_requests_waiting{{{POD}}})", "{{pod}} waiting"),
                _q(f"sum by (pod) (vllm:num_requests_running{{{POD}}})", "{{pod}} running"),
            ),
            min=0,
        ),
        PanelSpec(
            "KV-cache use",
            "Share of the KV-cache blocks in use, per pod (1 is full: new requests wait or preempt).",
            (_q(f"max by (pod) (vllm:kv_cache_usage_perc{{{POD}}})", "{{pod}}"),),
            unit="percentunit",
            min=0,
            max=1,
        ),
        PanelSpec(
            "Preemptions",
            "Requests vLLM preempted per second (their KV cache freed, recomputed later), per pod.",
            (_q(f"sum by (pod) (rate(vllm:num_preemptions_total{{{POD}}}[{RATE}]))", "{{pod}}"),),
            unit="ops",
            min=0,
        ),
    ),
)

ROWS: tuple[RowSpec, ...] = (OVERVIEW, CANARY, SPEC_DECODE, ADMISSION, SERVING)

VARIABLES: tuple[VariableSpec, ...] = (
    VariableSpec("namespace", "Namespace", "label_values(glmops_glmdeployment_replicas_desired, namespace)"),
    VariableSpec(
        "deployment",
        "GLMDeployment",
        'label_values(glmops_glmdeployment_replicas_desired{namespace=~"$namespace"}, glmdeployment)',
    ),
    VariableSpec("pod", "Pod", f"label_values(vllm:num_requests_running{{{DEPLOYMENT}}}, pod)"),
)


def panel_queries() -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel, in the dashboard's order."""
    for row in ROWS:
        for panel in row.panels:
            for query in panel.queries:
                yield panel.title, query.expr


def _targets(spec: PanelSpec) -> list[Builder[Dataquery]]:
    return [
        prometheus.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i))
        for i, q in enumerate(spec.queries)
    ]


def _legend() -> common.VizLegendOptions:
    return (
        common.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.LIST)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def _tooltip() -> common.VizTooltipOptions:
    return common.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)


def _panel(spec: PanelSpec) -> timeseries.Panel | statetimeline.Panel | stat.Panel:
    panel: timeseries.Panel | statetimeline.Panel | stat.Panel
    if spec.kind == "state":  # a 0/1 state per series over time
        panel = (
            statetimeline.Panel()
            .show_value(cm.VisibilityMode.NEVER)
            .merge_values(True)
            .legend(_legend())
            .tooltip(_tooltip())
            .thresholds(_states(spec.states))
            .color_scheme(gd.FieldColor().mode(gm.FieldColorModeId.THRESHOLDS))
        )
    elif spec.kind == "stat":  # how many now
        panel = (
            stat.Panel()
            .graph_mode(cm.BigValueGraphMode.NONE)
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        )
    else:
        panel = timeseries.Panel().legend(_legend()).tooltip(_tooltip())
    panel.title(spec.title).description(spec.description).datasource(DATASOURCE).unit(spec.unit)
    panel.span(spec.span).height(8).targets(_targets(spec))
    if spec.min is not None:
        panel.min(spec.min)
    if spec.max is not None:
        panel.max(spec.max)
    return panel


def _states(colours: tuple[str, str]) -> gd.ThresholdsConfig:
    below, at_one = colours
    return (
        gd.ThresholdsConfig()
        .mode(gm.ThresholdsMode.ABSOLUTE)
        .steps([gm.Threshold(value=None, color=below), gm.Threshold(value=1, color=at_one)])
    )


def _variable(spec: VariableSpec) -> gd.QueryVariable:
    return (
        gd.QueryVariable(spec.name)
        .label(spec.label)
        .datasource(DATASOURCE)
        .query(spec.query)
        .refresh(gm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(gm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def build_dashboard() -> gm.Dashboard:
    board = (
        gd.Dashboard(TITLE)
        .uid(UID)
        .description(
            "GLMDeployments served by glmops: replicas, canary verdicts, speculative decoding, admission, "
            "image builds and vLLM's serving health (docs/dashboard.md)."
        )
        .tags(["glmops", "vllm"])
        .editable()
        .tooltip(gm.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("1m")
        .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for variable in VARIABLES:
        board.with_variable(_variable(variable))
    ids = iter(range(1, 1000))  # stable panel ids: Grafana links to a panel by its id
    for row in ROWS:
        board.with_row(gd.Row(row.title).id(next(ids)))
        for spec in row.panels:
            board.with_panel(_panel(spec).id(next(ids)))
    return board.build()


def render_dashboard_json() -> str:
    return json.dumps(build_dashboard(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
