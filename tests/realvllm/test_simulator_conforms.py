"""The simulator held to real vLLM: the same requests to both, compared where glmops, its canary or its alerts read.

Compared: the fields and JSON types of /v1/models, chat and completion answers (with prompt logprobs); the status
codes and error bodies of bad requests; the name, type and label names of every metric family glmops reads.
Not compared, and why: the text of answers (the simulator plays GLM-5.x, the real server a random model), token
counts (the simulator counts words), and families glmops never reads.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.realvllm.conftest import SERVED_NAME, SPECULATIVE, RealServer

# Every family glmops reads: the canary (spec-decode), the alerts (docs/alerts.md), the dashboards' request and
# token rates, and the plugin's null-content counters.
READ_FAMILIES = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:num_requests_running",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "glmops_chat_completions",
    "glmops_chat_null_content",
)
CHAT = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Name a planet."}], "max_tokens": 4}
COMPLETION = {"model": SERVED_NAME, "prompt": "The quick brown fox", "max_tokens": 1, "echo": True, "logprobs": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """The simulator as the fleet runs it for a patched image: the same served name and speculative tokens."""
    port = _free_port()
    spec = str(SPECULATIVE["num_speculative_tokens"])
    args = ["sim", "--fault", "null-content", "--model", SERVED_NAME, "--spec-tokens", spec, "--port", str(port)]
    args += ["--patches", "null-content-metrics"]
    process = subprocess.Popen([sys.executable, "-m", "glm_operator.cli.main", *args])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def shape(value: Any) -> Any:
    """The JSON structure of a value: keys and JSON types, lists by their first element."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return {bool: "boolean", int: "number", float: "number", str: "string", type(None): "null"}[type(value)]


def both(real: RealServer, sim: str, method: str, path: str, **kwargs: Any) -> tuple[httpx.Response, httpx.Response]:
    return (
        httpx.request(method, f"{real.url}{path}", timeout=120, **kwargs),
        httpx.request(method, f"{sim}{path}", timeout=120, **kwargs),
    )


def test_models_list_has_the_same_fields(real_vllm: RealServer, sim_url: str) -> None:
    real, sim = both(real_vllm, sim_url, "GET", "/v1/models")
    assert shape(sim.json()) == shape(real.json())
    assert sim.json()["data"][0]["id"] == real.json()["data"][0]["id"] == SERVED_NAME


def test_a_null_content_chat_answer_has_the_same_fields_and_types(real_vllm: RealServer, sim_url: str) -> None:
    real, sim = both(real_vllm, sim_url, "POST", "/v1/chat/completions", json=CHAT)
    assert (real.status_code, sim.status_code) == (200, 200)
    assert shape(sim.json()) == shape(real.json()), json.dumps({"real": real.json(), "sim": sim.json()})
    for answer in (real.json(), sim.json()):
        message = answer["choices"][0]["message"]
        assert message["content"] is None and message["reasoning"].strip()


def test_prompt_logprobs_have_the_same_fields_and_types(real_vllm: RealServer, sim_url: str) -> None:
    real, sim = both(real_vllm, sim_url, "POST", "/v1/completions", json=COMPLETION)
    assert (real.status_code, sim.status_code) == (200, 200)
    assert shape(sim.json()) == shape(real.json()), json.dumps({"real": real.json(), "sim": sim.json()})
    for answer in (real.json(), sim.json()):
        logprobs = answer["choices"][0]["logprobs"]
        assert logprobs["token_logprobs"][0] is None
        assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"])


@pytest.mark.parametrize(
    "body",
    [
        {**CHAT, "model": "no-such-model"},
        {"model": SERVED_NAME},
        {**CHAT, "max_tokens": -1},
    ],
    ids=["unknown model", "no messages", "negative max_tokens"],
)
def test_a_bad_chat_request_gets_the_same_status_and_error_shape(
    real_vllm: RealServer, sim_url: str, body: dict[str, Any]
) -> None:
    real, sim = both(real_vllm, sim_url, "POST", "/v1/chat/completions", json=body)
    assert sim.status_code == real.status_code and 400 <= real.status_code < 500, real.text
    assert shape(sim.json()) == shape(real.json())


def test_a_body_that_is_not_json_gets_the_same_status(real_vllm: RealServer, sim_url: str) -> None:
    real, sim = both(real_vllm, sim_url, "POST", "/v1/chat/completions", content=b"not json")
    assert sim.status_code == real.status_code and 400 <= real.status_code < 500, real.text


def _families(text: str) -> dict[str, tuple[str, set[str]]]:
    out: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        labels = {label for sample in family.samples for label in sample.labels}
        out[family.name] = (family.type, labels)
    return out


def test_every_metric_glmops_reads_has_the_same_name_type_and_labels(real_vllm: RealServer, sim_url: str) -> None:
    for url in (real_vllm.url, sim_url):  # counters with labels appear once something was served
        httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=120)
    real, sim = both(real_vllm, sim_url, "GET", "/metrics")
    real_families, sim_families = _families(real.text), _families(sim.text)
    for name in READ_FAMILIES:
        assert name in real_families, name
        assert sim_families.get(name) == real_families[name], name
