"""The shipped alerts: valid rules that fire exactly when they should, and the chart's monitoring objects.

promtool (Debian's `prometheus` package, installed by hack/system-deps.sh) checks and unit-tests the plain
rules file; the pinned helm (cluster/build.sh) renders the chart with monitoring on, off and partly off.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.render.alerts import (
    ALERTS,
    BY_NAME,
    OPERATOR_JOB,
    RECORDINGS,
    RULES_FILE,
    alert_values,
    rule_groups,
)
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO
from tests.unit.test_render import rendered

RULES = REPO / RULES_FILE
CHART = REPO / "charts" / "glmops"
VALUES = (CHART / "values.yaml").read_text()
MINUTES = 60


# --- tools ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed: run hack/system-deps.sh (Debian package prometheus)")
    return found


def _template(helm: str, *sets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm template` with --set values; a number is passed with --set-json (--set turns 0.2 into a string)."""
    args = [helm, "template", "glmops", str(CHART), "--namespace", "glmops-system", *TEMPLATE_FLAGS]
    for value in sets:
        number = re.fullmatch(r"[^=]+=[0-9]*\.[0-9]+", value)
        args += ["--set-json" if number else "--set", value]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _objects(helm: str, *sets: str) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(_template(helm, *sets).stdout) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


# --- series and scenarios ---------------------------------------------------------------------------------------

MODEL = {"namespace": "team-a", "glmdeployment": "glm", "model_name": "zai-org/GLM-5.3"}
POD = {**MODEL, "pod": "glm-5d9c-x", "engine": "0", "job": "glmops-vllm", "instance": "127.20.0.5:8000"}
GLMD = {"namespace": "team-a", "glmdeployment": "glm", "job": OPERATOR_JOB}
OPERATOR_POD = {"namespace": "glmops", "pod": "glmops-0", "job": OPERATOR_JOB}
IMAGE = {"glmimage": "vllm-cuda-v0-34-0-glmops-1", "job": OPERATOR_JOB}
BUILDING = {**GLMD, "type": "ImageBuilding", "status": "True"}


def series(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


UP = series("up", {"job": OPERATOR_JOB, "instance": "10.0.0.7:8081"})


def counter(*segments: tuple[int, float]) -> str:
    """A counter's samples, one a minute: (minutes, increase per minute) segments, then flat to the end."""
    values, total = [0.0], 0.0
    for minutes, per_minute in segments:
        for _ in range(minutes):
            total += per_minute
            values.append(total)
    values += [total] * (MINUTES + 1 - len(values))
    return " ".join(f"{v:g}" for v in values)


def gauge(*segments: tuple[int, float | str]) -> str:
    """A gauge's samples, one a minute from 0 m: (minutes, value) segments; "_" is a missing sample."""
    values = [str(v) for minutes, v in segments for _ in range(minutes)]
    return " ".join(values + [values[-1]] * (MINUTES + 1 - len(values)))


LE = ("0.05", "0.5", "2.5", "5", "10", "+Inf")


def webhook(ok: tuple[int, float] = (MINUTES, 2), seconds: float = 0.02, errors: str | None = None) -> dict[str, str]:
    """The validating webhook's handler time: `ok` (minutes, reviews a minute) each taking `seconds`, and the
    count of reviews it raised on (`errors`, a counter's samples; none by default)."""
    labels = {**OPERATOR_POD, "webhook": "glmops-validate"}
    out = {
        series("glmops_webhook_request_duration_seconds_bucket", {**labels, "result": "ok", "le": le}): counter(
            ok if le == "+Inf" or seconds <= float(le) else (MINUTES, 0)
        )
        for le in LE
    }
    out[series("glmops_webhook_request_duration_seconds_count", {**labels, "result": "ok"})] = counter(ok)
    out[series("glmops_webhook_request_duration_seconds_count", {**labels, "result": "error"})] = errors or counter()
    return out


def healthy() -> dict[str, str]:
    """2 chat completions a second, none null; 10 draft tokens a second, 60 % accepted; canaries pass."""
    return {
        series("glmops_chat_completions_total", POD): counter((MINUTES, 120)),
        series("glmops_chat_null_content_total", POD): counter(),
        series("vllm:spec_decode_num_draft_tokens_total", POD): counter((MINUTES, 600)),
        series("vllm:spec_decode_num_accepted_tokens_total", POD): counter((MINUTES, 360)),
        series("glmops_canary_check_passed", {**GLMD, "check": "gsm8k"}): gauge((1, 1)),
        series("glmops_canary_check_passed", {**GLMD, "check": "smoke"}): gauge((1, 1)),
        series("glmops_canary_runs_total", {**GLMD, "result": "pass"}): counter((MINUTES, 0.1)),
        series("glmops_canary_runs_total", {**GLMD, "result": "fail"}): counter(),
        series("up", {"job": OPERATOR_JOB, "instance": "10.0.0.7:8081"}): gauge((1, 1)),
        series("glmops_glmdeployment_condition", {**GLMD, "type": "Degraded", "status": "True"}): gauge((1, 0)),
        series("glmops_glmdeployment_condition", {**GLMD, "type": "Degraded", "status": "False"}): gauge((1, 1)),
        series("glmops_glmdeployment_replicas_desired", GLMD): gauge((1, 2)),
        series("glmops_glmdeployment_replicas_ready", GLMD): gauge((1, 2)),
        series("glmops_glmdeployment_condition", BUILDING): gauge((1, 0)),
        series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Succeeded"}): gauge((1, 1)),
        series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Failed"}): gauge((1, 0)),
        **webhook(),
    }


@dataclass
class Scenario:
    name: str
    overrides: dict[str, str] = field(default_factory=dict)
    # eval minute -> alert name -> (labels beyond the alert's severity, the value as the annotations print it)
    firing: dict[int, dict[str, list[tuple[dict[str, str], str]]]] = field(default_factory=dict)
    quiet_at: tuple[int, ...] = ()  # minutes at which nothing may fire


def _each_failing_every(minutes: int) -> str:
    return counter(*[(minutes, 0), (1, 1)] * (MINUTES // (minutes + 1)))


SCENARIOS = [
    Scenario("healthy traffic", quiet_at=(10, 30, 60)),
    Scenario(
        "null-content burst: 12.5 % of answers from minute 20",
        {series("glmops_chat_null_content_total", POD): counter((20, 0), (40, 15))},
        firing={40: {"GLMOpsNullContentHigh": [(MODEL, "12.5%")]}},
        quiet_at=(20, 28),  # over 5 % from minute 25, firing after `for: 5m`
    ),
    Scenario(
        "zero acceptance of MTP drafts (vllm-52833)",
        {series("vllm:spec_decode_num_accepted_tokens_total", POD): counter()},
        firing={30: {"GLMOpsSpecDecodeAcceptanceLow": [(MODEL, "0%")]}},
        quiet_at=(12,),  # pending for `for: 15m`
    ),
    Scenario(
        "vllm-58729's share: 1,178 of 1,319 chat answers a minute null, from minute 10",
        {
            series("glmops_chat_completions_total", POD): counter((MINUTES, 1319)),
            series("glmops_chat_null_content_total", POD): counter((10, 0), (MINUTES, 1178)),
        },
        firing={40: {"GLMOpsNullContentHigh": [(MODEL, "89.31%")]}},
        quiet_at=(8,),
    ),
    Scenario(
        "vllm-52833's figures on MI355X: 0 of 378 draft tokens a minute accepted",
        {
            series("vllm:spec_decode_num_draft_tokens_total", POD): counter((MINUTES, 378)),
            series("vllm:spec_decode_num_accepted_tokens_total", POD): counter(),
        },
        firing={30: {"GLMOpsSpecDecodeAcceptanceLow": [(MODEL, "0%")]}},
    ),
    Scenario(
        "vllm-52833's working comparison: 177 of 395 draft tokens a minute accepted",
        {
            series("vllm:spec_decode_num_draft_tokens_total", POD): counter((MINUTES, 395)),
            series("vllm:spec_decode_num_accepted_tokens_total", POD): counter((MINUTES, 177)),
        },
        quiet_at=(15, 30, 60),
    ),
    Scenario(
        "idle model: one null answer every 10 minutes, a trickle of rejected drafts",
        {
            series("glmops_chat_completions_total", POD): _each_failing_every(9),
            series("glmops_chat_null_content_total", POD): _each_failing_every(9),
            series("vllm:spec_decode_num_draft_tokens_total", POD): counter((MINUTES, 30)),
            series("vllm:spec_decode_num_accepted_tokens_total", POD): counter(),
        },
        quiet_at=(15, 30, 60),
    ),
    Scenario(
        "idle model without speculative decoding traffic",
        {
            series("glmops_chat_completions_total", POD): counter(),
            series("vllm:spec_decode_num_draft_tokens_total", POD): counter(),
            series("vllm:spec_decode_num_accepted_tokens_total", POD): counter(),
        },
        quiet_at=(30, 60),
    ),
    Scenario(
        "gsm8k canary keeps failing",
        {
            series("glmops_canary_check_passed", {**GLMD, "check": "gsm8k"}): gauge((1, 0)),
            series("glmops_canary_runs_total", {**GLMD, "result": "fail"}): _each_failing_every(4),
        },
        firing={50: {"GLMOpsCanaryFailing": [({"namespace": "team-a", "glmdeployment": "glm", "check": "gsm8k"}, "")]}},
        quiet_at=(30,),
    ),
    Scenario(
        "gsm8k canary fails once while a pod loads, then passes",
        {
            series("glmops_canary_check_passed", {**GLMD, "check": "gsm8k"}): gauge((5, 1), (1, 0), (1, 1)),
            series("glmops_canary_runs_total", {**GLMD, "result": "fail"}): counter((5, 0), (1, 1)),
        },
        quiet_at=(15, 30, 60),
    ),
    Scenario(
        "a failed check's gauge stays at 0 after its GLMDeployment is gone (no more canary runs)",
        {
            series("glmops_canary_check_passed", {**GLMD, "check": "gsm8k"}): gauge((1, 0)),
            series("glmops_canary_runs_total", {**GLMD, "result": "fail"}): counter((2, 0), (1, 1)),
            series("glmops_canary_runs_total", {**GLMD, "result": "pass"}): counter(),
        },
        quiet_at=(40, 60),
    ),
    Scenario(
        "the canary cannot reach a deployment's pod (an attempt every 2 minutes)",
        {series("glmops_canary_runs_total", {**GLMD, "result": "unreachable"}): _each_failing_every(2)},
        firing={40: {"GLMOpsCanaryUnreachable": [({"namespace": "team-a", "glmdeployment": "glm"}, "")]}},
        quiet_at=(15,),
    ),
    Scenario(
        "one unreachable attempt while a pod restarts, then the canary runs again",
        {
            series("glmops_canary_runs_total", {**GLMD, "result": "unreachable"}): counter((5, 0), (1, 1)),
            series("glmops_canary_runs_total", {**GLMD, "result": "pass"}): counter((6, 0), (1, 1)),
        },
        quiet_at=(10, 20, 40),
    ),
    Scenario(
        "a GLMDeployment degraded from minute 5",
        {
            series("glmops_glmdeployment_condition", {**GLMD, "type": "Degraded", "status": "True"}): gauge(
                (5, 0), (1, 1)
            )
        },
        firing={40: {"GLMOpsDeploymentDegraded": [({"namespace": "team-a", "glmdeployment": "glm"}, "")]}},
        quiet_at=(15,),  # pending for `for: 15m`
    ),
    Scenario(
        "a GLMDeployment degraded for 10 minutes while a node drains, then ready again",
        {
            series("glmops_glmdeployment_condition", {**GLMD, "type": "Degraded", "status": "True"}): gauge(
                (5, 0), (10, 1), (1, 0)
            )
        },
        quiet_at=(14, 20, 40),
    ),
    # Longer than the other scenarios' hour (promtool's `a x n` notation): a build may run for 2 hours. The
    # operator stays up throughout; the other series end at 60 m and go stale.
    Scenario(
        "a GLMDeployment waits for its image from minute 5 on",
        {series("glmops_glmdeployment_condition", BUILDING): "0x4 1x200", UP: "1x210"},
        firing={160: {"GLMOpsDeploymentStuckBuilding": [({"namespace": "team-a", "glmdeployment": "glm"}, "")]}},
        quiet_at=(120, 150),  # pending for `for: 150m`, beyond the build Job's 2-hour deadline
    ),
    Scenario(
        "a GLMDeployment waits 100 minutes for a slow build, then runs",
        {series("glmops_glmdeployment_condition", BUILDING): "0x4 1x99 0x100", UP: "1x210"},
        quiet_at=(100, 160, 200),
    ),
    Scenario(
        "an image build fails at minute 30",
        {
            series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Building"}): gauge((30, 1), (1, 0)),
            series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Succeeded"}): gauge((1, 0)),
            series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Failed"}): gauge((30, 0), (1, 1)),
        },
        firing={40: {"GLMOpsImageBuildFailed": [({"glmimage": IMAGE["glmimage"]}, "")]}},
        quiet_at=(20, 32),  # building, then pending for `for: 5m`
    ),
    Scenario(
        "a failed image deleted after 3 minutes and built again",
        {
            series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Succeeded"}): gauge((1, 0)),
            series("glmops_glmimage_build_phase", {**IMAGE, "phase": "Failed"}): gauge((30, 0), (3, 1), (1, "stale")),
        },
        quiet_at=(32, 36, 40, 60),  # the series goes with the GLMImage (a stale marker on the next scrape)
    ),
    Scenario(
        "every pod of a deployment held out by the canary gate",
        {series("glmops_glmdeployment_replicas_ready", GLMD): gauge((1, 0))},
        firing={40: {"GLMOpsDeploymentUnavailable": [({"namespace": "team-a", "glmdeployment": "glm"}, "")]}},
        quiet_at=(20,),  # pending for `for: 30m` (a model loads in that time)
    ),
    Scenario(
        "a deployment scaled to zero has no ready pod on purpose",
        {
            series("glmops_glmdeployment_replicas_desired", GLMD): gauge((1, 0)),
            series("glmops_glmdeployment_replicas_ready", GLMD): gauge((1, 0)),
        },
        quiet_at=(40, 60),
    ),
    Scenario(
        "the webhook certificate has 10 days left",
        {series("glmops_webhook_certificate_expiry_timestamp_seconds", OPERATOR_POD): gauge((1, 10 * 86400))},
        firing={
            45: {"GLMOpsWebhookCertificateExpiring": [({"namespace": "glmops", "pod": "glmops-0"}, "9d 23h 15m 0s")]}
        },
        quiet_at=(20,),  # pending for `for: 30m`
    ),
    Scenario(
        "the webhook certificate has 60 days left",
        {series("glmops_webhook_certificate_expiry_timestamp_seconds", OPERATOR_POD): gauge((1, 60 * 86400))},
        quiet_at=(30, 55),
    ),
    Scenario(
        "the validating webhook's handler raises on 1 of 3 reviews from minute 10",
        webhook(errors=counter((10, 0), (MINUTES, 1))),
        firing={30: {"GLMOpsWebhookErrors": [({"webhook": "glmops-validate"}, "33.33%")]}},
        quiet_at=(15,),  # pending for `for: 10m`
    ),
    Scenario(
        "the validating webhook's handler raises once",
        webhook(errors=counter((10, 0), (1, 1))),
        quiet_at=(11, 15, 25, 40),
    ),
    Scenario(
        "every review takes 4 s from the start",
        webhook(seconds=4),
        firing={20: {"GLMOpsWebhookSlow": [({"webhook": "glmops-validate"}, "4.975s")]}},
        quiet_at=(8,),  # pending for `for: 10m`
    ),
    Scenario(
        "every review takes 0.4 s, well below the limit",
        webhook(seconds=0.4),
        quiet_at=(20, 40),
    ),
    Scenario(
        "no admission reviews at all",
        webhook(ok=(MINUTES, 0)),
        quiet_at=(20, 40),
    ),
    Scenario(
        "operator gone from minute 10",
        {series("up", {"job": OPERATOR_JOB, "instance": "10.0.0.7:8081"}): gauge((10, 1), (1, "_"))},
        firing={40: {"GLMOpsOperatorDown": [({}, "")]}},
        quiet_at=(20,),
    ),
    Scenario(
        "operator target down from minute 10",
        {series("up", {"job": OPERATOR_JOB, "instance": "10.0.0.7:8081"}): gauge((10, 1), (1, 0))},
        firing={40: {"GLMOpsOperatorDown": [({}, "")]}},
        quiet_at=(15,),
    ),
]


def _expand(template: str, labels: dict[str, str], value: str) -> str:
    """Prometheus' annotation templates as the shipped rules use them: $labels.<name> and $value | humanize*."""

    def one(match: re.Match[str]) -> str:
        action = match[1].strip()
        if action.startswith("$labels."):
            return labels[action.removeprefix("$labels.")]
        assert action.startswith("$value"), f"unexpected template action {action!r}: teach _expand"
        return value

    return re.sub(r"{{(.*?)}}", one, template)


def _expected(alert: str, labels: dict[str, str], value: str) -> dict[str, Any]:
    rule = next(r for g in rule_groups(VALUES) for r in g["rules"] if r.get("alert") == alert)
    all_labels = {**labels, **rule["labels"]}
    annotations = {k: _expand(v, all_labels, value) for k, v in rule["annotations"].items()}
    return {"exp_labels": all_labels, "exp_annotations": annotations}


def _unit_test_file(scenario: Scenario) -> dict[str, Any]:
    inputs = {**healthy(), **scenario.overrides}
    checks = []
    times = sorted({*scenario.firing, *scenario.quiet_at})
    for minute in times:
        for alert in ALERTS:
            firing = scenario.firing.get(minute, {}).get(alert.name, [])
            checks.append(
                {
                    "eval_time": f"{minute}m",
                    "alertname": alert.name,
                    "exp_alerts": [_expected(alert.name, labels, value) for labels, value in firing],
                }
            )
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in inputs.items()],
                "alert_rule_test": checks,
            }
        ],
    }


# --- promtool ---------------------------------------------------------------------------------------------------


def test_promtool_accepts_the_shipped_rules_file(promtool: str) -> None:
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS) + len(RECORDINGS)} rules found" in proc.stdout


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_alert_fires_exactly_when_it_should(promtool: str, scenario: Scenario, tmp_path: Path) -> None:
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(_unit_test_file(scenario), sort_keys=False, width=10_000))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_promtool_test_that_expects_the_wrong_alert_fails(promtool: str, tmp_path: Path) -> None:
    wrong = Scenario("healthy, claimed null-content", firing={40: {"GLMOpsNullContentHigh": [(MODEL, "12.5%")]}})
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(_unit_test_file(wrong), sort_keys=False, width=10_000))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, "the promtool harness cannot fail: the scenarios above prove nothing"


# --- the rules themselves (pure) ----------------------------------------------------------------------------------


def test_every_alert_has_severity_summary_description_and_a_runbook_section() -> None:
    docs = (REPO / "docs" / "alerts.md").read_text()
    headings = {h.lower() for h in re.findall(r"^## (\S+)$", docs, flags=re.MULTILINE)}
    base = yaml.safe_load(VALUES)["monitoring"]["prometheusRule"]["runbookBaseUrl"]
    for rule in (r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r):
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        url, anchor = rule["annotations"]["runbook_url"].split("#")
        assert url == base and url.endswith("docs/alerts.md"), rule["alert"]
        assert anchor == BY_NAME[rule["alert"]].anchor and anchor in headings, f"no docs/alerts.md section {anchor}"


def test_values_must_configure_every_alert_and_parameter() -> None:
    values = yaml.safe_load(VALUES)
    del values["monitoring"]["prometheusRule"]["alerts"]["GLMOpsNullContentHigh"]["minRequestRate"]
    values["monitoring"]["prometheusRule"]["alerts"]["GLMOpsTypo"] = {"enabled": True}
    with pytest.raises(ValueError) as refused:
        alert_values(yaml.safe_dump(values))
    assert "GLMOpsNullContentHigh.minRequestRate: missing" in str(refused.value)
    assert "GLMOpsTypo: no such alert" in str(refused.value)


def test_acceptance_threshold_defaults_to_the_canarys_minimum_acceptance() -> None:
    from glm_operator.api.v1alpha1 import NullContentCanary, SpecDecodeCanary

    alerts = alert_values(VALUES)
    assert alerts["GLMOpsSpecDecodeAcceptanceLow"]["minAcceptance"] == SpecDecodeCanary().min_acceptance
    assert alerts["GLMOpsNullContentHigh"]["maxRate"] == NullContentCanary().max_rate


# --- the chart (helm template) ------------------------------------------------------------------------------------

MONITORING_ON = ("monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true")
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_monitoring_is_off_by_default_but_the_operator_serves_metrics(helm: str) -> None:
    objects = _objects(helm)
    assert not {o["kind"] for o in objects.values()} & MONITORING_KINDS
    assert "Service/glmops-metrics" not in objects
    container = objects["Deployment/glmops"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GLMOPS_METRICS_PORT", "value": "8081"} in container["env"]
    assert {"name": "metrics", "containerPort": 8081} in container["ports"]


def test_service_monitor_scrapes_the_operators_metrics_port_as_job_glmops_operator(helm: str) -> None:
    objects = _objects(helm, *MONITORING_ON, "monitoring.serviceMonitor.labels.release=kps")
    monitor, service = objects["ServiceMonitor/glmops"], objects["Service/glmops-metrics"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= objects["Service/glmops-webhook"]["metadata"]["labels"].items()
    ), "the webhook Service has no metrics port"
    pod = objects["Deployment/glmops"]["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    assert {"targetLabel": "job", "replacement": OPERATOR_JOB} in endpoint["relabelings"]


def _pod_labels(obj: dict[str, Any]) -> list[tuple[dict[str, str], list[str]]]:
    """(labels, port names) of each pod template of a rendered workload."""
    spec = obj["spec"]
    lws = spec.get("leaderWorkerTemplate", {})
    templates = [spec["template"]] if "template" in spec else [lws["leaderTemplate"], lws["workerTemplate"]]
    return [
        (t["metadata"]["labels"], [p["name"] for c in t["spec"]["containers"] for p in c.get("ports", [])])
        for t in templates
    ]


@pytest.mark.parametrize(
    "glmd, lws",
    [
        (B().tensor(8).build(), True),
        (B().tensor(8).pipeline(2).build(), True),
        (B().tensor(8).pipeline(2).build(), False),
    ],
    ids=["deployment", "leaderworkerset", "statefulset-groups"],
)
def test_pod_monitor_selects_exactly_the_pods_that_serve_http(helm: str, glmd: dict[str, Any], lws: bool) -> None:
    monitor = _objects(helm, *MONITORING_ON)["PodMonitor/glmops-vllm"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    drop = next(r for r in endpoint["relabelings"] if r.get("action") == "drop")
    _, objects = rendered(glmd, lws=lws)
    workloads = [o for o in objects if o["kind"] in {"Deployment", "LeaderWorkerSet", "StatefulSet"}]
    for labels, ports in (p for w in workloads for p in _pod_labels(w)):
        selected = selector.items() <= labels.items()
        assert selected == ("http" in ports), labels
        if labels.get("glmops.dev/role") == "group":  # StatefulSet pods: only index 0 serves HTTP
            for index, kept in (("0", True), ("1", False), ("12", False)):
                assert (re.fullmatch(drop["regex"], f"group;{index}") is None) == kept
        elif selected:
            assert re.fullmatch(drop["regex"], f"{labels.get('glmops.dev/role', '')};0") is None
    assert endpoint["port"] == "http" and monitor["spec"]["namespaceSelector"] == {"any": True}


def test_pod_monitor_follows_the_watched_namespaces(helm: str) -> None:
    monitor = _objects(helm, *MONITORING_ON, "watchNamespaces={team-a,team-b}")["PodMonitor/glmops-vllm"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    assert "PodMonitor/glmops-vllm" not in _objects(helm, *MONITORING_ON, "monitoring.serviceMonitor.vllmPods=false")


def test_prometheus_rule_holds_the_plain_rules_file_with_default_values(helm: str) -> None:
    rule = _objects(helm, *MONITORING_ON, "monitoring.prometheusRule.labels.release=kps")["PrometheusRule/glmops"]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_an_alert_switched_off_is_left_out_and_the_others_stay(helm: str) -> None:
    off = "monitoring.prometheusRule.alerts.GLMOpsSpecDecodeAcceptanceLow.enabled=false"
    groups = _objects(helm, *MONITORING_ON, off)["PrometheusRule/glmops"]["spec"]["groups"]
    names = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert names == [a.name for a in ALERTS if a.name != "GLMOpsSpecDecodeAcceptanceLow"]


def test_a_group_whose_alerts_are_all_off_is_left_out(helm: str) -> None:
    sets = [f"monitoring.prometheusRule.alerts.{a.name}.enabled=false" for a in ALERTS if a.group == "glmops.operator"]
    groups = _objects(helm, *MONITORING_ON, *sets)["PrometheusRule/glmops"]["spec"]["groups"]
    assert [g["name"] for g in groups] == ["glmops.recording", "glmops.serving"]


def test_thresholds_severity_and_for_from_values_reach_valid_rules(helm: str, promtool: str, tmp_path: Path) -> None:
    prefix = "monitoring.prometheusRule.alerts.GLMOpsNullContentHigh"
    rule = _objects(
        helm,
        *MONITORING_ON,
        f"{prefix}.maxRate=0.2",
        "monitoring.prometheusRule.alerts.GLMOpsCanaryFailing.window=30m",
        f"{prefix}.for=1h",
        f"{prefix}.severity=page",
        "monitoring.prometheusRule.runbookBaseUrl=https://wiki.example/alerts/",
    )["PrometheusRule/glmops"]
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    null, canary = rules["GLMOpsNullContentHigh"], rules["GLMOpsCanaryFailing"]
    assert ":ratio_rate > 0.2\n" in null["expr"]
    assert "[30m]" in canary["expr"] and "[15m]" not in canary["expr"]
    assert null["for"] == "1h" and null["labels"] == {"severity": "page"}
    assert null["annotations"]["runbook_url"] == "https://wiki.example/alerts#glmopsnullcontenthigh"
    rendered_rules = tmp_path / "rules.yaml"
    rendered_rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = subprocess.run([promtool, "check", "rules", str(rendered_rules)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_values_schema_refuses_an_unknown_alert(helm: str) -> None:
    proc = _template(helm, "monitoring.prometheusRule.alerts.GLMOpsTypo.enabled=false", check=False)
    assert proc.returncode != 0 and "GLMOpsTypo" in proc.stderr


# --- recording rules ------------------------------------------------------------------------------------------

OTHER_POD = {**POD, "pod": "glm-5d9c-y", "instance": "127.20.0.6:8000"}


def _recorded(inputs: dict[str, str], minute: int, expected: dict[str, list[tuple[dict[str, str], float]]]) -> Any:
    """A promtool test file: each recorded series' samples at `minute` (recorded series carry only their labels)."""
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in inputs.items()],
                "promql_expr_test": [
                    {
                        "expr": f"round({record}, 0.000001)",  # rates are float sums: compared to 6 places
                        "eval_time": f"{minute}m",
                        "exp_samples": [
                            {"labels": series("", labels), "value": round(value, 6)} for labels, value in samples
                        ],
                    }
                    for record, samples in expected.items()
                ],
            }
        ],
    }


def _promtool_test(promtool: str, tmp_path: Path, test: Any) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "recorded.yaml"
    path.write_text(yaml.safe_dump(test))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


def _recorded_labels(pod: dict[str, str]) -> dict[str, str]:
    return {k: pod[k] for k in ("namespace", "glmdeployment", "model_name", "pod")}


def test_recording_rules_give_the_upstream_ratios_per_model_and_per_pod(promtool: str, tmp_path: Path) -> None:
    """Pod y serves vllm-58729's 1,178 null of 1,319 answers a minute and vllm-52833's 0 of 378 drafts accepted;
    pod x the working comparison, 177 of 395, and no null answer."""
    inputs = {
        series("glmops_chat_completions_total", POD): counter((MINUTES, 1319)),
        series("glmops_chat_null_content_total", POD): counter(),
        series("glmops_chat_completions_total", OTHER_POD): counter((MINUTES, 1319)),
        series("glmops_chat_null_content_total", OTHER_POD): counter((MINUTES, 1178)),
        series("vllm:spec_decode_num_draft_tokens_total", POD): counter((MINUTES, 395)),
        series("vllm:spec_decode_num_accepted_tokens_total", POD): counter((MINUTES, 177)),
        series("vllm:spec_decode_num_draft_tokens_total", OTHER_POD): counter((MINUTES, 378)),
        series("vllm:spec_decode_num_accepted_tokens_total", OTHER_POD): counter(),
        series("glmops_canary_check_passed", {**GLMD, "pod": "glm-5d9c-x", "check": "gsm8k"}): gauge((1, 1)),
        series("glmops_canary_check_passed", {**GLMD, "pod": "glm-5d9c-y", "check": "gsm8k"}): gauge((1, 0)),
        series("glmops_canary_check_passed", {**GLMD, "pod": "glm-5d9c-x", "check": "smoke"}): gauge((1, 1)),
        series("glmops_canary_check_passed", {**GLMD, "pod": "glm-5d9c-y", "check": "smoke"}): gauge((1, 1)),
    }
    x, y = _recorded_labels(POD), _recorded_labels(OTHER_POD)
    level, per_pod = "namespace_glmdeployment_model_name", "namespace_glmdeployment_model_name_pod"
    deployment = {"namespace": "team-a", "glmdeployment": "glm"}
    expected = {
        f"{level}:glmops_chat_null_content:ratio_rate": [(MODEL, 1178 / 2638)],
        f"{per_pod}:glmops_chat_null_content:ratio_rate": [(x, 0.0), (y, 1178 / 1319)],
        f"{level}:glmops_chat_completions:rate": [(MODEL, 2638 / 60)],
        f"{per_pod}:glmops_chat_completions:rate": [(x, 1319 / 60), (y, 1319 / 60)],
        f"{level}:vllm_spec_decode_draft_acceptance:ratio_rate": [(MODEL, 177 / 773)],
        f"{per_pod}:vllm_spec_decode_draft_acceptance:ratio_rate": [(x, 177 / 395), (y, 0.0)],
        f"{level}:vllm_spec_decode_num_draft_tokens:rate": [(MODEL, 773 / 60)],
        f"{per_pod}:vllm_spec_decode_num_draft_tokens:rate": [(x, 395 / 60), (y, 378 / 60)],
        "namespace_glmdeployment_check:glmops_canary_check_failing_pods:ratio": [
            ({**deployment, "check": "gsm8k"}, 0.5),
            ({**deployment, "check": "smoke"}, 0.0),
        ],
    }
    assert set(expected) == {r.record for r in RECORDINGS}, "every recording rule has a case"
    proc = _promtool_test(promtool, tmp_path, _recorded(inputs, 30, expected))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and the check can fail: pod y's null share is not pod x's
    wrong = {f"{per_pod}:glmops_chat_null_content:ratio_rate": [(x, 1178 / 1319), (y, 0.0)]}
    assert _promtool_test(promtool, tmp_path, _recorded(inputs, 30, wrong)).returncode != 0


def test_alerts_that_read_recorded_series_refuse_the_recording_rules_switched_off(helm: str) -> None:
    off = "monitoring.prometheusRule.recordingRules.enabled=false"
    proc = _template(helm, *MONITORING_ON, off, check=False)
    assert proc.returncode != 0 and "GLMOpsNullContentHigh read the recorded series" in proc.stderr
    with pytest.raises(ValueError, match="GLMOpsNullContentHigh, GLMOpsSpecDecodeAcceptanceLow, GLMOpsCanaryFailing"):
        rule_groups(
            VALUES.replace(
                "recordingRules:\n      # -- Ship the recording rules.\n      enabled: true",
                "recordingRules:\n      enabled: false",
            )
        )
    readers = [f"monitoring.prometheusRule.alerts.{a.name}.enabled=false" for a in ALERTS if a.recorded]
    groups = _objects(helm, *MONITORING_ON, off, *readers)["PrometheusRule/glmops"]["spec"]["groups"]
    assert "glmops.recording" not in [g["name"] for g in groups]
    assert all("alert" in r for g in groups for r in g["rules"])


def test_the_recording_window_from_values_reaches_the_records_and_the_alerts_text(helm: str) -> None:
    window = "monitoring.prometheusRule.recordingRules.window=30s"
    groups = _objects(helm, *MONITORING_ON, window)["PrometheusRule/glmops"]["spec"]["groups"]
    records = [r for g in groups for r in g["rules"] if "record" in r]
    rates = [r for r in records if "rate(" in r["expr"]]
    assert rates and all("[30s]" in r["expr"] and "[10m]" not in r["expr"] for r in rates)
    null = next(r for g in groups for r in g["rules"] if r.get("alert") == "GLMOpsNullContentHigh")
    assert "over the last 30s" in null["annotations"]["description"]


def test_the_docs_count_the_alerts_shipped() -> None:
    words = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
    ]
    docs = (REPO / "docs" / "alerts.md").read_text()
    said = re.search(r"glmops ships (\w+) Prometheus alerts", docs)
    assert said is not None and words.index(said[1]) == len(ALERTS)
