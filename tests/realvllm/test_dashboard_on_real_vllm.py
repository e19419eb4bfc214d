"""The dashboard's vLLM and plugin metric names on the real vLLM server's own /metrics.

tests/unit/test_dashboard.py checks the names against the fact `prometheus-metrics`, read from vLLM's source; this
holds both to a running server: the one glmops renders for a GLM-5.3 pod (with ngram speculative decoding, so the
spec-decode counters exist), after one chat answer so every latency histogram has been observed.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import served_metric_names
from glm_operator.render import dashboard
from glm_operator.render.alerts import RECORD_WINDOW, RECORDINGS
from tests.realvllm.conftest import SERVED_NAME, RealServer
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
