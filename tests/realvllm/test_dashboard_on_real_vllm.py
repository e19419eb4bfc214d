"""The dashboard on the real vLLM server: its metric names on vLLM's own /metrics, and its serving panels' queries
answered by a real Prometheus that scrapes the server as the chart's PodMonitor would.

tests/unit/test_dashboard.py checks the names against the fact `prometheus-metrics`, read from vLLM's source; this
holds both to a running server: the one glmops renders for a GLM-5.3 pod (with ngram speculative decoding, so the
spec-decode counters exist), after chat answers so every latency histogram has been observed. The Prometheus is
test_alerts_on_real_vllm.py's (the chart's recording rules, 1 s scrapes).
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import served_metric_names
from glm_operator.render import dashboard
from glm_operator.render.alerts import RECORD_WINDOW, RECORDINGS
from tests.realvllm import prometheus as prom
from tests.realvllm.conftest import SERVED_NAME, RealServer
from tests.realvllm.rendered import SPEC
from tests.realvllm.test_alerts_on_real_vllm import NAMESPACE, POD_NAME, Traffic, prometheus  # noqa: F401 - fixture
from tests.support import promql

PLUGIN_PREFIX = "glmops_chat_"


def _served(url: str) -> set[str]:
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": SERVED_NAME, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8},
        timeout=120,
    )
    reply.raise_for_status()
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _dashboard_names() -> set[str]:
    """Every series the dashboard reads, a recorded one replaced by the series its recording rule reads."""
    names = {n for _title, expr in dashboard.panel_queries() for n in promql.metric_names(expr)}
    for variable in dashboard.VARIABLES:
        names |= promql.metric_names(promql.label_values_selector(variable.query)[0])
    for recording in RECORDINGS:
        if recording.record in names:
            names.discard(recording.record)
            names |= promql.metric_names(recording.expr.replace(RECORD_WINDOW, "10m"))
    return names


def test_every_vllm_and_plugin_metric_the_dashboard_names_is_served(real_vllm: RealServer) -> None:
    served = _served(real_vllm.url)
    read = {n for n in _dashboard_names() if n.startswith(("vllm:", PLUGIN_PREFIX))}
    assert any(n.startswith("vllm:") for n in read) and any(n.startswith(PLUGIN_PREFIX) for n in read)
    missing = sorted(read - served)
    assert not missing, f"the dashboard names {missing}, which the real vLLM server does not serve"


def test_the_fact_read_from_vllms_source_names_what_this_version_serves(real_vllm: RealServer) -> None:
    version = httpx.get(f"{real_vllm.url}/version", timeout=30).json()["version"]
    expected = served_metric_names(Version.parse(version.split("+")[0]))
    missing = sorted(expected - _served(real_vllm.url))
    assert not missing, f"vLLM {version} serves none of {missing} (fact prometheus-metrics)"


ANSWER_TIMEOUT_S = 180


def _serving_queries() -> list[tuple[str, str]]:
    """The panels' queries that read only what a serving pod exposes (vLLM, the plugin, their recorded ratios):
    the operator's metrics have no operator here."""
    return [
        (title, expr)
        for title, expr in dashboard.panel_queries()
        if not any(n.startswith("glmops_") for n in promql.metric_names(expr))
    ]


def test_every_serving_panel_shows_the_real_pod_in_a_real_prometheus(
    real_vllm: RealServer,
    prometheus: str,  # noqa: F811 - the fixture imported above
) -> None:
    queries = _serving_queries()
    assert len(queries) >= 8, queries
    traffic = Traffic(real_vllm.url)
    empty: list[str] = []
    try:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while time.monotonic() < deadline:
            answers = {
                title: prom.query(prometheus, promql.as_sent(expr, rate_interval="30s")) for title, expr in queries
            }
            empty = [title for title, series in answers.items() if not series]
            if not empty:
                break
            time.sleep(3)
    finally:
        traffic.stop()
    assert not empty, f"panels with no series after {ANSWER_TIMEOUT_S} s of traffic: {empty}"
    for title, series in answers.items():
        for one in series:  # each panel's legend names the pod or its deployment
            labels = one["metric"]
            assert labels.get("pod", POD_NAME) == POD_NAME, (title, labels)
            assert labels.get("glmdeployment", SPEC["metadata"]["name"]) == SPEC["metadata"]["name"], (title, labels)
    selector, label = promql.label_values_selector(next(v for v in dashboard.VARIABLES if v.name == "pod").query)
    pods = {s["metric"][label] for s in prom.query(prometheus, promql.as_sent(selector))}
    assert pods == {POD_NAME}
    assert {s["metric"]["namespace"] for s in prom.query(prometheus, promql.as_sent(selector))} == {NAMESPACE}
