"""glmops' Prometheus alerts: the one source of the plain rules file and of the chart's PrometheusRule.

Each alert is PromQL with `${param}` placeholders; the parameters (switch, severity, `for`, windows,
thresholds) and their defaults live in the chart's values.yaml under `monitoring.prometheusRule.alerts`.
`glmctl generate` writes from here:
- `charts/glmops/files/alerts.yaml`: a plain Prometheus rules file with the values.yaml defaults, what
  `promtool check rules` / `promtool test rules` read and what a Prometheus without the operator loads;
- `charts/glmops/templates/prometheusrule.yaml`: the same rules as a Helm template, each behind its
  `alerts.<Name>.enabled` switch and with its parameters read from the release's values (the way
  kube-prometheus-stack generates its rule templates from upstream rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from string import Template
from typing import Any

import yaml

RULES_FILE = "charts/glmops/files/alerts.yaml"
RULE_TEMPLATE = "charts/glmops/templates/prometheusrule.yaml"
DEFAULT_RUNBOOK_BASE = "https://github.com/glmops/glmops/blob/main/docs/alerts.md"
# Job labels the chart's ServiceMonitor and PodMonitor set for a release named glmops: `<fullname>-operator` and
# `<fullname>-vllm` in general, one per release, so one release's healthy operator never hides another's being down.
# The plain rules file names these; the chart's PrometheusRule its release's own.
OPERATOR_JOB = "glmops-operator"
VLLM_JOB = "glmops-vllm"
# Placeholders the chart fills from the release rather than from monitoring.prometheusRule.alerts: each with the
# plain rules file's value and the Helm variable the PrometheusRule template defines for it.
CHART_PARAMS = {"operatorJob": (OPERATOR_JOB, "$operatorJob"), "recordWindow": ("10m", "$recordWindow")}
# Placeholders fixed by the recording rules, not configurable.
# The recording rules' rate window (monitoring.prometheusRule.recordingRules.window), a placeholder like the others.
RECORD_WINDOW = "${recordWindow}"
# Keys of an alert's values that are not expression parameters.
_FIXED_KEYS = ("enabled", "severity", "for")
PER_MODEL = "namespace, glmdeployment, model_name"


@dataclass(frozen=True)
class Alert:
    name: str
    group: str
    expr: str  # PromQL with ${param} placeholders (values.yaml: monitoring.prometheusRule.alerts.<name>.<param>)
    summary: str  # Prometheus alert templates ({{ $labels.x }}, {{ $value }}) and ${param} placeholders
    description: str

    @property
    def anchor(self) -> str:
        """The docs/alerts.md heading anchor of the alert's runbook (GitHub: lower case)."""
        return self.name.lower()

    @property
    def params(self) -> tuple[str, ...]:
        """The expression's parameters that values.yaml configures (not the chart's CHART_PARAMS)."""
        return tuple(p for p in Template(self.expr).get_identifiers() if p not in CHART_PARAMS)

    @property
    def recorded(self) -> tuple[str, ...]:
        """The recorded series (RECORDINGS) the expression reads."""
        return tuple(sorted(r for r in RECORDED if r in self.expr))


def _ratio(numerator: str, denominator: str, by: str = PER_MODEL) -> str:
    return (
        f"(\n  sum by ({by}) (rate({numerator}[${{window}}]))\n/\n  sum by ({by}) (rate({denominator}[${{window}}]))\n)"
    )


@dataclass(frozen=True)
class Recording:
    """A recorded series the alerts and dashboards share, named `level:metric:operations` (Prometheus' convention)."""

    record: str
    expr: str


RECORDING_GROUP = "glmops.recording"
PER_POD = f"{PER_MODEL}, pod"
_LEVEL = {PER_MODEL: "namespace_glmdeployment_model_name", PER_POD: "namespace_glmdeployment_model_name_pod"}
NULL_CONTENT_RATIO = f"{_LEVEL[PER_MODEL]}:glmops_chat_null_content:ratio_rate"
COMPLETIONS_RATE = f"{_LEVEL[PER_MODEL]}:glmops_chat_completions:rate"
ACCEPTANCE_RATIO = f"{_LEVEL[PER_MODEL]}:vllm_spec_decode_draft_acceptance:ratio_rate"
CANARY_FAILING = "namespace_glmdeployment_check:glmops_canary_check_failing_pods:ratio"
DRAFT_RATE = f"{_LEVEL[PER_MODEL]}:vllm_spec_decode_num_draft_tokens:rate"
# The same ratios per serving pod (the dashboard's panels, render/dashboard.py).
POD_NULL_CONTENT_RATIO = f"{_LEVEL[PER_POD]}:glmops_chat_null_content:ratio_rate"
POD_COMPLETIONS_RATE = f"{_LEVEL[PER_POD]}:glmops_chat_completions:rate"
POD_ACCEPTANCE_RATIO = f"{_LEVEL[PER_POD]}:vllm_spec_decode_draft_acceptance:ratio_rate"


def _recorded_ratio(numerator: str, denominator: str, by: str) -> str:
    return (
        f"sum by ({by}) (rate({numerator}[{RECORD_WINDOW}]))\n/\nsum by ({by}) (rate({denominator}[{RECORD_WINDOW}]))\n"
    )


def _recorded_rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}[{RECORD_WINDOW}]))\n"


def _recordings() -> tuple[Recording, ...]:
    null, chats = "glmops_chat_null_content_total", "glmops_chat_completions_total"
    accepted, drafts = "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"
    out = []
    for by, level in _LEVEL.items():
        out += [
            Recording(f"{level}:glmops_chat_null_content:ratio_rate", _recorded_ratio(null, chats, by)),
            Recording(f"{level}:glmops_chat_completions:rate", _recorded_rate(chats, by)),
            Recording(
                f"{level}:vllm_spec_decode_draft_acceptance:ratio_rate",
                _recorded_ratio(accepted, drafts, by),
            ),
            Recording(f"{level}:vllm_spec_decode_num_draft_tokens:rate", _recorded_rate(drafts, by)),
        ]
    out.append(Recording(CANARY_FAILING, "1 - avg by (namespace, glmdeployment, check) (glmops_canary_check_passed)\n"))
    return tuple(out)


RECORDINGS = _recordings()
RECORDED = frozenset(r.record for r in RECORDINGS)


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GLMOpsNullContentHigh",
        group="glmops.serving",
        expr=f"{NULL_CONTENT_RATIO} > ${{maxRate}}\nand\n{COMPLETIONS_RATE} > ${{minRequestRate}}\n",
        summary="{{ $labels.model_name }} in {{ $labels.namespace }}: {{ $value | humanizePercentage }} of chat "
        "answers have no content.",
        description=(
            "{{ $value | humanizePercentage }} of the chat completions of {{ $labels.model_name }} "
            "(GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }}) over the last ${recordWindow} had "
            "empty content with the answer only in the reasoning (limit ${maxRate} of at least ${minRequestRate} "
            "completions per second). Answers are wrong while /health stays green; vllm-58729 looked like this."
        ),
    ),
    Alert(
        name="GLMOpsSpecDecodeAcceptanceLow",
        group="glmops.serving",
        expr=f"{ACCEPTANCE_RATIO} < ${{minAcceptance}}\nand\n{DRAFT_RATE} > ${{minDraftTokenRate}}\n",
        summary="{{ $labels.model_name }} in {{ $labels.namespace }} accepts {{ $value | humanizePercentage }} of "
        "its speculative draft tokens.",
        description=(
            "Speculative decoding (MTP) of {{ $labels.model_name }} (GLMDeployment "
            "{{ $labels.namespace }}/{{ $labels.glmdeployment }}) accepted {{ $value | humanizePercentage }} of its "
            "draft tokens over the last ${recordWindow} (limit ${minAcceptance}). Drafting is pure overhead; 0 % is "
            "the vllm-52833 signature (BF16 MLA weights re-quantized by AITER's FP4/FP8 BMM on MI355X)."
        ),
    ),
    Alert(
        name="GLMOpsCanaryFailing",
        group="glmops.operator",
        expr=(
            f"max_over_time({CANARY_FAILING}[${{window}}]) > 0\n"
            "and on (namespace, glmdeployment)\n"
            'sum by (namespace, glmdeployment) (increase(glmops_canary_runs_total{result="fail"}[${window}])) > 0\n'
        ),
        summary="Canary check {{ $labels.check }} keeps failing for GLMDeployment "
        "{{ $labels.namespace }}/{{ $labels.glmdeployment }}.",
        description=(
            "The operator's canary runs against pods of {{ $labels.namespace }}/{{ $labels.glmdeployment }} kept "
            "failing check {{ $labels.check }} (a failure in every ${window} window). Failing pods stay out of the "
            "Service (readiness gate glmops.dev/canary False); a rollout stalls and capacity shrinks."
        ),
    ),
    Alert(
        name="GLMOpsCanaryUnreachable",
        group="glmops.operator",
        expr=(
            'sum by (namespace, glmdeployment) (increase(glmops_canary_runs_total{result="unreachable"}[${window}]))'
            " > 0\n"
        ),
        summary="The canary cannot ask pods of GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }}.",
        description=(
            "The operator's canary could not ask pods of {{ $labels.namespace }}/{{ $labels.glmdeployment }} at all "
            "(connection refused or reset, timeouts, HTTP errors, answers that are not the API's) in every ${window} "
            "window. Those pods stay out of the Service with reason CanaryUnreachable on their readiness gate; "
            "the gate's message and status.canary.pods name the error."
        ),
    ),
    Alert(
        name="GLMOpsDeploymentDegraded",
        group="glmops.operator",
        expr=(
            'max by (namespace, glmdeployment) (glmops_glmdeployment_condition{type="Degraded", status="True"}) == 1\n'
        ),
        summary="GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} is degraded.",
        description=(
            "The Degraded condition of GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} has been "
            "True for ${for} (fewer replicas ready than asked for, or a serving configuration the operator could "
            "not keep). Its reason and message say which: kubectl get glmd -o yaml."
        ),
    ),
    Alert(
        name="GLMOpsDeploymentStuckBuilding",
        group="glmops.operator",
        expr=(
            "max by (namespace, glmdeployment) "
            '(glmops_glmdeployment_condition{type="ImageBuilding", status="True"}) == 1\n'
        ),
        summary="GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} has waited for its image for "
        "${for}.",
        description=(
            "The ImageBuilding condition of GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} has "
            "been True for ${for}, longer than a build Job may run (imageBuild.deadlineSeconds): its workload is not "
            "rendered and no pod of it starts. The GLMImage it waits for and its build Job say why: "
            "kubectl get glmimage -o yaml."
        ),
    ),
    Alert(
        name="GLMOpsImageBuildFailed",
        group="glmops.operator",
        expr='max by (glmimage) (glmops_glmimage_build_phase{phase="Failed"}) == 1\n',
        summary="The build of GLMImage {{ $labels.glmimage }} failed.",
        description=(
            "GLMImage {{ $labels.glmimage }} is Failed: its build Job ended without pushing an image, and a Failed "
            "image stays failed until it is deleted. Every GLMDeployment that runs its image waits with "
            "ImageBuilding False and starts no pod. Its Built condition and status.logTail say why: "
            "kubectl get glmimage {{ $labels.glmimage }} -o yaml."
        ),
    ),
    Alert(
        name="GLMOpsDeploymentUnavailable",
        group="glmops.operator",
        expr=(
            "max by (namespace, glmdeployment) (glmops_glmdeployment_replicas_ready) == 0\n"
            "and on (namespace, glmdeployment)\n"
            "max by (namespace, glmdeployment) (glmops_glmdeployment_replicas_desired) > 0\n"
        ),
        summary="No pod of GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} is ready.",
        description=(
            "GLMDeployment {{ $labels.namespace }}/{{ $labels.glmdeployment }} asks for replicas and none has been "
            "ready for ${for}: nothing serves it. Pods held out by the canary gate, pods that cannot be scheduled "
            "and pods still loading all count as not ready; status.canary.pods and the events say which."
        ),
    ),
    Alert(
        name="GLMOpsWebhookCertificateExpiring",
        group="glmops.operator",
        expr=(
            "min by (namespace, pod) (glmops_webhook_certificate_expiry_timestamp_seconds) - time()"
            " < ${minDaysLeft} * 86400\n"
        ),
        summary="The glmops admission webhook's certificate expires in {{ $value | humanizeDuration }}.",
        description=(
            "The certificate the glmops admission webhook serves (operator pod {{ $labels.pod }}) expires in "
            "{{ $value | humanizeDuration }} (limit ${minDaysLeft} days). Once it has expired the API server "
            "cannot call the webhook and, with failurePolicy Fail, refuses every GLMDeployment change."
        ),
    ),
    Alert(
        name="GLMOpsWebhookErrors",
        group="glmops.operator",
        expr=(
            "(\n"
            '  sum by (webhook) (rate(glmops_webhook_request_duration_seconds_count{result="error"}[${window}]))\n'
            "/\n"
            "  sum by (webhook) (rate(glmops_webhook_request_duration_seconds_count[${window}]))\n"
            ") > ${maxErrorRatio}\n"
        ),
        summary="The glmops admission webhook {{ $labels.webhook }} fails {{ $value | humanizePercentage }} of "
        "its reviews.",
        description=(
            "The operator's admission handler {{ $labels.webhook }} raised on {{ $value | humanizePercentage }} of "
            "the AdmissionReviews it got over the last ${window} (limit ${maxErrorRatio}) and answered them 400. "
            "With failurePolicy Fail the API server refuses those GLMDeployment changes; the operator's log has the "
            "traceback (webhook ... failed on review ...)."
        ),
    ),
    Alert(
        name="GLMOpsWebhookSlow",
        group="glmops.operator",
        expr=(
            "histogram_quantile(0.99,\n"
            "  sum by (webhook, le) (rate(glmops_webhook_request_duration_seconds_bucket[${window}]))\n"
            ") > ${maxSeconds}\n"
        ),
        summary="The glmops admission webhook {{ $labels.webhook }} takes {{ $value | humanizeDuration }} at "
        "its 99th percentile.",
        description=(
            "99 % of the AdmissionReviews the operator's handler {{ $labels.webhook }} answered over the last "
            "${window} took up to {{ $value | humanizeDuration }} (limit ${maxSeconds} s). Past the webhook's "
            "timeoutSeconds (10 s by default) the API server gives up and, with failurePolicy Fail, refuses the "
            "change."
        ),
    ),
    Alert(
        name="GLMOpsOperatorDown",
        group="glmops.operator",
        expr='absent(up{job="${operatorJob}"} == 1)\n',
        summary="No glmops operator is being scraped successfully.",
        description=(
            'Prometheus has no healthy target of job "${operatorJob}". Without the operator no new serving pod '
            "becomes Ready (their readiness gate is never set), Ready pods are no longer re-checked and "
            "GLMDeployments are neither admitted nor reconciled."
        ),
    ),
)
BY_NAME = {alert.name: alert for alert in ALERTS}


def alert_values(values_text: str) -> dict[str, dict[str, Any]]:
    """`monitoring.prometheusRule.alerts` of values.yaml; each alert with its switch, severity, for and params."""
    values = yaml.safe_load(values_text) or {}
    configured: dict[str, dict[str, Any]] = values["monitoring"]["prometheusRule"]["alerts"]
    problems = [f"{a.name}: missing from values.yaml" for a in ALERTS if a.name not in configured]
    problems += [f"{name}: no such alert" for name in configured if name not in BY_NAME]
    for alert in ALERTS:
        missing = [k for k in (*_FIXED_KEYS, *alert.params) if k not in configured.get(alert.name, {})]
        problems += [f"{alert.name}.{key}: missing from values.yaml" for key in missing]
    if problems:
        raise ValueError("monitoring.prometheusRule.alerts: " + "; ".join(problems))
    return configured


def _number(value: Any) -> str:
    """A parameter as Helm prints it (Go's %v of a float64): 1.0 -> 1, 0.05 -> 0.05."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _rule(alert: Alert, params: dict[str, str], runbook: str, severity: str, for_: str) -> dict[str, Any]:
    return {
        "alert": alert.name,
        "expr": Template(alert.expr).substitute(params),
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": Template(alert.summary).safe_substitute(params),
            "description": Template(alert.description).safe_substitute(params),
            "runbook_url": runbook,
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, so the rules read like PromQL."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000, default_flow_style=False)


def _groups() -> dict[str, list[Alert]]:
    groups: dict[str, list[Alert]] = {}
    for alert in ALERTS:
        groups.setdefault(alert.group, []).append(alert)
    return groups


RECORDING_OFF = (
    "monitoring.prometheusRule.recordingRules.enabled: false: alerts {} read the recorded series "
    "(docs/alerts.md, Recording rules). Switch those alerts off too, or the recording rules on."
)


def rule_groups(values_text: str, runbook_base: str = DEFAULT_RUNBOOK_BASE) -> list[dict[str, Any]]:
    """The enabled rule groups with the parameters of values.yaml."""
    configured = alert_values(values_text)
    recording_rules = yaml.safe_load(values_text)["monitoring"]["prometheusRule"]["recordingRules"]
    recording = bool(recording_rules["enabled"])
    chart = {k: plain for k, (plain, _) in CHART_PARAMS.items()} | {"recordWindow": str(recording_rules["window"])}
    needing = [a.name for a in ALERTS if a.recorded and configured[a.name]["enabled"]]
    if needing and not recording:
        raise ValueError(RECORDING_OFF.format(", ".join(needing)))
    out: list[dict[str, Any]] = []
    if recording:
        rules = [{"record": r.record, "expr": Template(r.expr).substitute(chart)} for r in RECORDINGS]
        out.append({"name": RECORDING_GROUP, "rules": rules})
    for group, alerts in _groups().items():
        rules = []
        for alert in alerts:
            cfg = configured[alert.name]
            if not cfg["enabled"]:
                continue
            params = {p: _number(cfg[p]) for p in alert.params} | chart
            runbook = f"{runbook_base.rstrip('/')}#{alert.anchor}"
            rules.append(_rule(alert, params, runbook, str(cfg["severity"]), str(cfg["for"])))
        if rules:
            out.append({"name": group, "rules": rules})
    return out


def render_rules_file(values_text: str) -> str:
    values = yaml.safe_load(values_text) or {}
    runbook_base = values["monitoring"]["prometheusRule"]["runbookBaseUrl"]
    head = (
        f"# glmops' alerts as a plain Prometheus rules file, generated by `glmctl generate` from\n"
        f"# operator/glm_operator/render/alerts.py with the defaults of charts/glmops/values.yaml; do not edit.\n"
        f"# The chart's PrometheusRule ({RULE_TEMPLATE}) holds the same rules; runbooks: docs/alerts.md.\n"
    )
    return head + _dump({"groups": rule_groups(values_text, runbook_base)})


# --- the Helm template --------------------------------------------------------------------------------------------

_SENTINEL = "glmopsparam{}end"
_SENTINEL_RE = re.compile(r"glmopsparam(\w+?)end")
_CHART_SENTINEL = "glmopschart{}end"
_RUNBOOK_SENTINEL = "glmopsrunbookend"
# monitoring.prometheusRule.additionalRuleLabels / additionalRuleAnnotations (kube-prometheus-stack's names) on every
# rule, as strings (Prometheus labels are), never replacing what the rule sets itself.
_EXTRA = (
    "    {{{{- range $key, $value := omit $rule.{values} {keep} }}}}\n"
    "    {{{{ $key }}}}: {{{{ $value | toString | quote }}}}\n"
    "    {{{{- end }}}}\n"
)


def _helm_rule(alert: Alert) -> str:
    """One rule as Helm template text, evaluated inside `with $alerts.<name>` (so `.param` is the value)."""
    params = {p: _SENTINEL.format(p) for p in alert.params} | {p: _CHART_SENTINEL.format(p) for p in CHART_PARAMS}
    rule = _rule(alert, params, _RUNBOOK_SENTINEL, _SENTINEL.format("severity"), _SENTINEL.format("for"))
    text = _dump([rule])
    text = text.replace("{{", '{{ "{{" }}')  # Prometheus' own templates pass through Helm verbatim
    text = _SENTINEL_RE.sub(lambda m: "{{ ." + m[1] + " }}", text)
    for name, (_, variable) in CHART_PARAMS.items():
        text = text.replace(_CHART_SENTINEL.format(name), "{{ " + variable + " }}")
    severity = "    severity: {{ .severity }}\n"
    runbook = f"    runbook_url: {_RUNBOOK_SENTINEL}\n"
    text = text.replace(severity, severity + _EXTRA.format(values="additionalRuleLabels", keep='"severity"'))
    keep = " ".join(f'"{k}"' for k in rule["annotations"])
    text = text.replace(runbook, runbook + _EXTRA.format(values="additionalRuleAnnotations", keep=keep))
    text = text.replace(_RUNBOOK_SENTINEL, '{{ printf "%s#%s" $runbook "' + alert.anchor + '" }}')
    return "".join(f"        {line}\n" for line in text.splitlines())


def render_prometheus_rule_template() -> str:
    lines = [
        "{{- /* Generated by `glmctl generate` from operator/glm_operator/render/alerts.py; do not edit. */}}",
        "{{- if .Values.monitoring.prometheusRule.enabled }}",
        "{{- $rule := .Values.monitoring.prometheusRule }}",
        "{{- $alerts := $rule.alerts }}",
        '{{- $runbook := trimSuffix "/" $rule.runbookBaseUrl }}',
        '{{- $operatorJob := include "glmops.operatorJob" . }}',
        "{{- $recordWindow := $rule.recordingRules.window }}",
        "apiVersion: monitoring.coreos.com/v1",
        "kind: PrometheusRule",
        "metadata:",
        '  name: {{ include "glmops.fullname" . }}',
        "  namespace: {{ .Release.Namespace }}",
        "  labels:",
        '    {{- include "glmops.labels" . | nindent 4 }}',
        "    {{- with $rule.labels }}",
        "    {{- toYaml . | nindent 4 }}",
        "    {{- end }}",
        "spec:",
        "  groups:",
    ]
    needing = " ".join(f'"{a.name}"' for a in ALERTS if a.recorded)
    message = RECORDING_OFF.format("%s")
    lines += [
        "{{- if not $rule.recordingRules.enabled }}",
        f'{{{{- range list {needing} }}}}{{{{- if dig . "enabled" false $alerts }}}}',
        f'{{{{- fail (printf "{message}" .) }}}}',
        "{{- end }}{{- end }}",
        "{{- else }}",
        f"    - name: {RECORDING_GROUP}",
        "      rules:",
    ]
    window = {"recordWindow": "{{ $recordWindow }}"}
    recorded = _dump([{"record": r.record, "expr": Template(r.expr).substitute(window)} for r in RECORDINGS])
    lines += [f"        {line}" for line in recorded.splitlines()]
    lines.append("{{- end }}")
    for group, alerts in _groups().items():
        switches = " ".join(f'(dig "{a.name}" "enabled" false $alerts)' for a in alerts)
        lines += [f"{{{{- if or {switches} }}}}", f"    - name: {group}", "      rules:"]
        for alert in alerts:
            lines.append(f"{{{{- with $alerts.{alert.name} }}}}{{{{- if .enabled }}}}")
            lines.append(_helm_rule(alert).rstrip("\n"))
            lines.append("{{- end }}{{- end }}")
        lines.append("{{- end }}")
    lines.append("{{- end }}")
    return "\n".join(lines) + "\n"
