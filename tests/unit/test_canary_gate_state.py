"""The gate's decisions: fail fast before first Ready, hysteresis after, backoff between retries."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from glm_operator.api.constants import Reason
from glm_operator.api.v1alpha1 import GSM8KSource
from glm_operator.canary.checks import acceptance, spec_counters
from glm_operator.canary.client import reasoning_of
from glm_operator.canary.results import CheckResult, SuiteResult
from glm_operator.cli.main import main
from glm_operator.render.canary_state import GateState, pod_is_serving_ready

PASS = SuiteResult([CheckResult("smoke", True, 1.0, 1.0, "4/4")])
FAIL = SuiteResult([CheckResult("gsm8k", False, 0.0, 0.82, "0/3 correct")])


def test_a_pod_that_never_passed_fails_at_once_and_backs_off() -> None:
    state = GateState()
    assert state.observe(FAIL, failures_to_unready=2) == (
        "False",
        Reason.CANARY_FAILED,
        "gsm8k 0 (threshold 0.82): 0/3 correct",
    )
    assert state.next_delay(FAIL, 600) == 15
    state.observe(FAIL, 2)
    assert state.next_delay(FAIL, 600) == 30
    for _ in range(10):
        state.observe(FAIL, 2)
    assert state.next_delay(FAIL, 600) == 600


def test_a_ready_pod_survives_one_bad_recheck_and_goes_after_the_second() -> None:
    state = GateState()
    assert state.observe(PASS, 2)[0] == "True"  # type: ignore[index]
    assert state.next_delay(PASS, 600) == 600
    assert state.observe(FAIL, 2) is None, "one failure does not flap a Ready pod"
    decision = state.observe(FAIL, 2)
    assert decision is not None and decision[0] == "False"


def test_recheck_zero_means_never() -> None:
    assert GateState().next_delay(PASS, 0) > 24 * 3600


@pytest.mark.parametrize(
    "status, ready",
    [
        ({"phase": "Running", "conditions": [{"type": "ContainersReady", "status": "True"}]}, True),
        ({"phase": "Running", "conditions": [{"type": "ContainersReady", "status": "False"}]}, False),
        ({"phase": "Pending"}, False),
    ],
)
def test_canaries_start_once_the_server_container_is_ready(status: dict, ready: bool) -> None:
    assert pod_is_serving_ready(status) is ready


def test_reasoning_is_read_from_either_field_name() -> None:
    assert reasoning_of({"reasoning": "a"}) == "a"
    assert reasoning_of({"reasoning_content": "b"}) == "b"
    assert reasoning_of({"content": "c"}) == ""


METRICS = """# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {d}
vllm:spec_decode_num_draft_tokens_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}
vllm:spec_decode_num_accepted_tokens_created{{engine="0",model_name="m"}} 1.7e9
"""


def test_acceptance_reads_the_exact_total_counters_not_created() -> None:
    before = spec_counters(METRICS.format(d=100, a=40))
    after = spec_counters(METRICS.format(d=478, a=40))
    result = acceptance(before, after, 0.2)
    assert not result.passed and result.value == 0.0 and "0/378" in result.detail
    healthy = acceptance(before, spec_counters(METRICS.format(d=495, a=217)), 0.2)
    assert healthy.passed and healthy.value == pytest.approx(177 / 395)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sim_url(request: pytest.FixtureRequest) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "glm_operator.cli.main", "sim", "--port", str(port), "--fault", request.param],
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.parametrize("sim_url, code", [("none", 0), ("stale-topk", 1)], indirect=["sim_url"])
def test_glmctl_canary_exits_0_on_pass_and_1_on_fail_with_json(
    sim_url: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["canary", "--url", sim_url, "-o", "json"]) == code
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is (code == 0)
    assert {"name", "passed", "value", "threshold", "detail"} <= set(out["checks"][0])


def test_glmctl_canary_exits_2_when_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["canary", "--url", f"http://127.0.0.1:{_free_port()}"]) == 2
    assert "unreachable" in capsys.readouterr().err


@pytest.mark.parametrize("sim_url", ["none"], indirect=True)
def test_glmctl_canary_prints_a_table_and_runs_only_the_suites_asked(
    sim_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["canary", "--url", sim_url, "--suite", "smoke", "--suite", "copy"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["CHECK", "RESULT", "VALUE", "THRESHOLD"]
    assert "smoke" in out and "copy" in out and "gsm8k" not in out and out.rstrip().endswith("PASSED")


def test_summary_counts_passing_pods_and_names_the_first_failure() -> None:
    from glm_operator.render.canary_state import summarize

    reports = {
        "a": {"passed": True, "message": "ok"},
        "b": {"passed": False, "message": "gsm8k 0 (threshold 0.82)"},
        "gone": None,
    }
    assert summarize(reports) == "1/2 pods passed; failing b: gsm8k 0 (threshold 0.82)"


def test_gsm8k_comes_from_a_url_or_a_configmap(monkeypatch: pytest.MonkeyPatch) -> None:
    import http.server
    import threading
    from types import SimpleNamespace

    from glm_operator.canary import fetch
    from glm_operator.catalog.access_policy import AccessPolicy
    from glm_operator.k8s import canary_data

    # The test server is on loopback, which the operator never fetches from; here that one address stands in for
    # a public one, and the policy allows its URL.
    monkeypatch.setattr(fetch, "public_address_problem", lambda a: None if a == "127.0.0.1" else "not the test's")

    line = '{"question": "Q1?", "answer": "so\\n#### 7"}\n'

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(line.encode())

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/t"
    policy = AccessPolicy(canary_urls=(url,))
    try:
        source = GSM8KSource.model_validate({"url": url})
        questions, _ = canary_data.gsm8k_for(source, "ns", policy)
        assert [q.label for q in questions] == ["7"]
    finally:
        server.shutdown()
    fake = SimpleNamespace(read_namespaced_config_map=lambda name, ns: SimpleNamespace(data={"test.jsonl": line}))
    monkeypatch.setattr(canary_data, "core_v1", lambda: fake)
    source = GSM8KSource.model_validate({"configMap": "gsm8k"})
    assert canary_data.gsm8k_for(source, "ns", policy)[0][0].question == "Q1?"
    monkeypatch.delenv("GLMOPS_GSM8K_PATH", raising=False)
    assert len(canary_data.gsm8k_for(GSM8KSource(), "ns", policy)[0]) == 200, "generated when no source"


def test_a_suite_that_could_not_run_backs_off_and_leaves_the_gate_and_failure_count_alone() -> None:
    from glm_operator.render.canary_state import MAX_UNREACHABLE_S, GateState

    state = GateState(gate="True", failures=1)
    delays = [state.could_not_run() for _ in range(8)]
    assert delays[:4] == [5.0, 10.0, 20.0, 40.0] and delays[-1] == MAX_UNREACHABLE_S
    assert state.gate == "True" and state.failures == 1


def test_a_pod_that_cannot_be_asked_is_held_out_with_the_reason_after_three_attempts() -> None:
    state = GateState()
    verdicts = []
    for _ in range(3):
        state.could_not_run()
        verdicts.append(state.unreachable_verdict("HTTP 500: engine dead", failures_to_unready=2))
    assert verdicts[:2] == [None, None]
    assert verdicts[2] == ("False", Reason.CANARY_UNREACHABLE, "the canary cannot ask this pod: HTTP 500: engine dead")
    report = state.unreachable_report("HTTP 500: engine dead")
    assert report["passed"] is False and report["failed"] == ["unreachable"]
    assert "3 attempts in a row" in report["message"] and "HTTP 500" in report["message"]


def test_a_ready_pod_that_cannot_be_asked_waits_for_failures_to_unready_as_well() -> None:
    state = GateState()
    state.observe(PASS, 5)
    found = []
    for _ in range(5):
        state.could_not_run()
        found.append(state.unreachable_verdict("reset", failures_to_unready=5))
    assert found[:4] == [None] * 4 and found[4] is not None and found[4][1] == Reason.CANARY_UNREACHABLE


def test_a_pod_that_answers_again_passes_and_its_unreachable_count_restarts() -> None:
    state = GateState()
    for _ in range(3):
        state.could_not_run()
    assert state.unreachable_verdict("refused", 2) is not None
    assert state.observe(PASS, 2) == ("True", Reason.CANARY_PASSED, "all 1 checks passed")
    state.could_not_run()
    assert state.unreachable_verdict("refused", 2) is None, "one blip on a Ready pod is not enough"
