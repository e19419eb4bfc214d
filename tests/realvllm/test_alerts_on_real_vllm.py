"""The shipped alerts in a real Prometheus, on the real vLLM server's own /metrics.

The chart is rendered with its PrometheusRule and PodMonitor on; only values change (scrape interval, each
serving alert's `for`, the recording rules' window), never the rules. Prometheus (Debian's package) scrapes the
real server as the PodMonitor would have it scrape a serving pod: the pod's labels as Kubernetes service
discovery presents them, the PodMonitor's relabelings, and the namespace and pod labels the Prometheus Operator
adds. The tiny model never closes its reasoning block, so chat traffic makes the glmops plugin's null-content
counter climb.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.realvllm import prometheus as prom
from tests.realvllm.conftest import SERVED_NAME, RealServer
from tests.realvllm.rendered import SPEC, rendered_pod

NAMESPACE = "team-a"
POD_NAME = f"{SPEC['metadata']['name']}-5d9c7-x2x4q"
SERVING_ALERTS = ("GLMOpsNullContentHigh", "GLMOpsSpecDecodeAcceptanceLow")
WINDOW, FOR = "30s", "5s"
# Shortened through values only: a 1 s scrape and evaluation, the recording rules' window (the serving alerts read
# the recorded ratios) and each serving alert's for.
VALUES = [
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.serviceMonitor.interval=1s",
    "monitoring.prometheusRule.enabled=true",
    f"monitoring.prometheusRule.recordingRules.window={WINDOW}",
    *(f"monitoring.prometheusRule.alerts.{a}.for={FOR}" for a in SERVING_ALERTS),
]
ALERT_TIMEOUT_S = 240


def _as_discovered(target: str) -> dict[str, Any]:
    """The real server as Kubernetes service discovery would present the serving pod glmops renders."""
    pod = rendered_pod()
    labels = {f"__meta_kubernetes_pod_label_{prom.meta_label(k)}": v for k, v in pod.labels.items()}
    labels |= {
        "__meta_kubernetes_namespace": NAMESPACE,
        "__meta_kubernetes_pod_name": POD_NAME,
        "__meta_kubernetes_pod_container_port_name": pod.container["ports"][0]["name"],
    }
    return {"static_configs": [{"targets": [target], "labels": labels}]}


@pytest.fixture(scope="module")
def prometheus(real_vllm: RealServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _, promtool = prom.binaries()
    objects = prom.chart_monitoring(VALUES)
    work = tmp_path_factory.mktemp("prometheus")
    rules = work / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": objects["PrometheusRule"]["spec"]["groups"]}))
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    job = prom.pod_monitor_job(objects["PodMonitor"], _as_discovered(str(urlsplit(real_vllm.url).netloc)))
    config = {
        "global": {"scrape_interval": job["scrape_interval"], "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [job],
    }
    with prom.running(config, work) as url:
        yield url


CHAT = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Count from 1 to 20."}], "max_tokens": 24}


def disagreeing_drafts(url: str) -> dict[str, Any]:
    """A completion whose every ngram draft the model refuses: 3 draft tokens made, none accepted.

    The prompt is `a b c d a b c d a b` (token ids) and the model may only say `c`: after it, the context ends in
    `a b c`, seen before followed by `d a b`, which vLLM's ngram proposer drafts and the rejection sampler turns
    down (the target can only say `c`). A model that disagrees with every draft is the vllm-52833 figure (0 %).
    """
    ids = httpx.post(f"{url}/tokenize", json={"model": SERVED_NAME, "prompt": "alpha beta gamma delta"}).json()
    a, b, c, d = list(dict.fromkeys(ids["tokens"]))[:4]
    return {
        "model": SERVED_NAME,
        "prompt": [a, b, c, d, a, b, c, d, a, b],
        "allowed_token_ids": [c],
        "max_tokens": 3,
    }


class Traffic:
    """Chat completions (null content) and repeating completions (drafts) on threads of their own until stopped."""

    def __init__(self, url: str, per_kind: int = 2) -> None:
        self.url, self.completion = url, disagreeing_drafts(url)
        self.sent = {"chat": 0, "completions": 0}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True)
            for kind in self.sent
            for _ in range(per_kind)
        ]
        for thread in self._threads:
            thread.start()

    def _loop(self, kind: str) -> None:
        path, body = ("/v1/chat/completions", CHAT) if kind == "chat" else ("/v1/completions", self.completion)
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                client.post(f"{self.url}{path}", json=body).raise_for_status()
                self.sent[kind] += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)


def _alerts(prometheus: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{prometheus}/api/v1/alerts").json()
    assert answer["status"] == "success", answer
    return {a["labels"]["alertname"]: a for a in answer["data"]["alerts"]}


def _first_states(prometheus: str, seconds: int) -> dict[tuple[str, str], float]:
    """When Prometheus first recorded each serving alert in each state, from its own ALERTS series.

    A poll of /api/v1/alerts can miss a short `pending` on a loaded machine; the rule evaluator writes every state
    it passes through into ALERTS at each evaluation, so reading that history misses none.
    """
    names = "|".join(SERVING_ALERTS)
    result = prom.query(prometheus, f'ALERTS{{alertname=~"{names}"}}[{seconds}s]')
    return {
        (series["metric"]["alertname"], series["metric"]["alertstate"]): min(float(t) for t, _ in series["values"])
        for series in result
    }


def _query(prometheus: str, expr: str) -> float | None:
    result = prom.query(prometheus, expr)
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def alert_run(real_vllm: RealServer, prometheus: str) -> Iterator[dict[str, Any]]:
    """Traffic until both serving alerts fire; every alert state seen, by name, with when it was first seen."""
    traffic = Traffic(real_vllm.url)
    start = time.monotonic()
    seen: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    figures: dict[str, Any] = {}
    history: dict[tuple[str, str], float] = {}
    try:
        while time.monotonic() - start < ALERT_TIMEOUT_S:
            for name, alert in _alerts(prometheus).items():
                seen.setdefault((name, alert["state"]), (time.monotonic() - start, alert))
            if all((name, "firing") in seen for name in SERVING_ALERTS):
                break
            time.sleep(1)
        by = "namespace, glmdeployment, model_name"
        window = WINDOW
        for figure, expr in {
            "null_share": f"sum by ({by}) (rate(glmops_chat_null_content_total[{window}])) / "
            f"sum by ({by}) (rate(glmops_chat_completions_total[{window}]))",
            "chat_rate": f"sum by ({by}) (rate(glmops_chat_completions_total[{window}]))",
            "acceptance": f"sum by ({by}) (rate(vllm:spec_decode_num_accepted_tokens_total[{window}])) / "
            f"sum by ({by}) (rate(vllm:spec_decode_num_draft_tokens_total[{window}]))",
            "draft_rate": f"sum by ({by}) (rate(vllm:spec_decode_num_draft_tokens_total[{window}]))",
        }.items():
            figures[figure] = _query(prometheus, expr)
        figures["alerts_now"] = {n: a["state"] for n, a in _alerts(prometheus).items()}
        history = _first_states(prometheus, int(time.monotonic() - start) + 30)
    finally:
        traffic.stop()
    print(
        f"\nalerts on the real server: {sorted((k, round(v[0], 1)) for k, v in seen.items())}; {traffic.sent} requests"
    )
    print(f"figures over {WINDOW}: {figures}")
    print(f"first recorded in ALERTS (unix s): {sorted(history.items())}")
    yield {"seen": seen, "figures": figures, "history": history}


def test_null_content_high_goes_pending_then_firing_on_vllms_own_counters(alert_run: dict[str, Any]) -> None:
    seen, history = alert_run["seen"], alert_run["history"]
    assert ("GLMOpsNullContentHigh", "firing") in seen, alert_run
    # Pending first, then firing, as Prometheus recorded them (its `for` held the alert back).
    assert ("GLMOpsNullContentHigh", "pending") in history, alert_run
    assert history[("GLMOpsNullContentHigh", "firing")] > history[("GLMOpsNullContentHigh", "pending")]
    _, alert = seen[("GLMOpsNullContentHigh", "firing")]
    assert alert["labels"] == {
        "alertname": "GLMOpsNullContentHigh",
        "namespace": NAMESPACE,
        "glmdeployment": SPEC["metadata"]["name"],
        "model_name": SERVED_NAME,
        "severity": "critical",
    }
    # Nearly every answer has its text only in the reasoning: the share the summary prints.
    assert float(alert["value"]) >= 0.9
    assert alert["annotations"]["summary"].startswith(f"{SERVED_NAME} in {NAMESPACE}: ")
    assert alert["annotations"]["runbook_url"].endswith("#glmopsnullcontenthigh")
    assert alert_run["figures"]["null_share"] >= 0.9


def test_spec_decode_acceptance_low_fires_on_vllms_real_ngram_counters(alert_run: dict[str, Any]) -> None:
    seen, figures, history = alert_run["seen"], alert_run["figures"], alert_run["history"]
    # What the alert watches, as Prometheus computes it: drafts made above the guard, hardly any accepted.
    assert figures["draft_rate"] > 1.0 and figures["acceptance"] < 0.2, figures
    assert ("GLMOpsSpecDecodeAcceptanceLow", "firing") in seen, alert_run
    assert ("GLMOpsSpecDecodeAcceptanceLow", "pending") in history, alert_run
    assert history[("GLMOpsSpecDecodeAcceptanceLow", "firing")] > history[("GLMOpsSpecDecodeAcceptanceLow", "pending")]
    _, alert = seen[("GLMOpsSpecDecodeAcceptanceLow", "firing")]
    assert alert["labels"] == {
        "alertname": "GLMOpsSpecDecodeAcceptanceLow",
        "namespace": NAMESPACE,
        "glmdeployment": SPEC["metadata"]["name"],
        "model_name": SERVED_NAME,
        "severity": "warning",
    }
    assert float(alert["value"]) < 0.2
    assert alert["annotations"]["runbook_url"].endswith("#glmopsspecdecodeacceptancelow")
