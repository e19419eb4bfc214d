"""The canaries against the simulator on a real socket: healthy passes, each failure signature fails."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from glm_operator.api.v1alpha1 import CanarySpec
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.gsm8k import Sequential, last_integer, wilson
from glm_operator.canary.gsm8k_data import generate, parse_jsonl, solve_generated
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.sim.behaviour import Model
from glm_operator.sim.faults import fault_of, parse_serve_args, startup_error
from glm_operator.sim.server import Simulator, serve

SHARED_GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k" / "test.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _started(fault: str, spec_tokens: int = 0) -> tuple[OpenAIClient, asyncio.Task[None]]:
    port = _free_port()
    task = asyncio.create_task(serve(Simulator(Model(fault), "zai-org/GLM-5.3", spec_tokens), "127.0.0.1", port))
    client = OpenAIClient(f"http://127.0.0.1:{port}")
    for _ in range(100):
        try:
            await client.model_name()
            break
        except EndpointError:
            await asyncio.sleep(0.05)
    return client, task


@pytest.fixture
async def endpoint(request: pytest.FixtureRequest) -> AsyncIterator[tuple[OpenAIClient, int]]:
    fault, spec_tokens = request.param
    client, task = await _started(fault, spec_tokens)
    yield client, spec_tokens
    await client.close()
    task.cancel()


def _failed(result) -> set[str]:  # noqa: ANN001
    return {c.name for c in result.checks if not c.passed}


@pytest.mark.parametrize(
    "endpoint, failing",
    [
        (("none", 3), set()),
        (("garbled", 0), {"smoke", "gsm8k", "null-content", "copy"}),
        (("null-content", 0), {"smoke", "null-content", "copy"}),
        (("stale-topk", 0), {"copy", "gsm8k"}),
        (("mtp-zero", 3), {"spec-decode"}),
    ],
    indirect=["endpoint"],
    ids=["healthy", "garbled", "null-content", "stale-topk", "mtp-zero"],
)
async def test_each_failure_signature_is_caught_by_its_canaries(
    endpoint: tuple[OpenAIClient, int], failing: set[str]
) -> None:
    client, spec_tokens = endpoint
    result = await run_suite(client, SuiteInputs(config=CanarySpec(), speculative=spec_tokens > 0))
    assert failing <= _failed(result), result.as_dict()
    assert result.passed == (not failing)


@pytest.mark.parametrize("endpoint", [("garbled", 0)], indirect=True)
async def test_a_zero_percent_model_fails_gsm8k_within_a_handful_of_questions(
    endpoint: tuple[OpenAIClient, int],
) -> None:
    client, _ = endpoint
    config = CanarySpec()
    result = await run_suite(client, SuiteInputs(config=config, only=("gsm8k",)))
    assert "0/3 correct" in result.checks[0].detail


@pytest.mark.parametrize("endpoint", [("none", 0)], indirect=True)
async def test_a_healthy_model_passes_gsm8k_without_the_full_set(endpoint: tuple[OpenAIClient, int]) -> None:
    client, _ = endpoint
    result = await run_suite(client, SuiteInputs(only=("gsm8k",)))
    assert result.passed and "50/50" in result.checks[0].detail


@pytest.mark.skipif(not SHARED_GSM8K.is_file(), reason="needs ../shared/data/gsm8k (GSM8K is not shipped)")
async def test_the_simulator_answers_real_gsm8k_from_gold_and_the_scorer_reads_it() -> None:
    items = parse_jsonl(SHARED_GSM8K.read_text())
    assert len(items) == 1319 and items[0].label == "18"
    model = Model("none", items[:10])
    text = model.completion(f"Question: {items[3].question}\nAnswer:")
    assert last_integer(text) == items[3].label


async def test_unreachable_endpoint_raises_endpoint_error() -> None:
    client = OpenAIClient(f"http://127.0.0.1:{_free_port()}", timeout=2)
    with pytest.raises(EndpointError):
        await client.model_name()
    await client.close()


def test_sequential_test_bounds() -> None:
    assert wilson(0, 3)[1] < 0.82 < wilson(0, 2)[1]
    test = Sequential(0.82)
    for _ in range(49):
        test.add(True)
    assert test.decided() is None
    test.add(True)
    assert test.decided() is True


def test_generated_problems_are_solvable_and_deterministic() -> None:
    items = generate(50, seed=7)
    assert items == generate(50, seed=7)
    assert all(str(solve_generated(i.question)) == i.label for i in items)


@pytest.mark.parametrize(
    "args, env, gpu, version, patches, fault",
    [
        (
            ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "-dp", "8", "--enable-expert-parallel"],
            {},
            "GB200",
            "0.30.0",
            set(),
            "garbled",
        ),
        (
            ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "-dp", "8", "--enable-expert-parallel"],
            {},
            "GB200",
            "0.30.0",
            {"moe-mxfp4-expert-map"},
            "none",
        ),
        (
            ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "-dp", "8", "--enable-expert-parallel"],
            {},
            "GB200",
            "0.32.0",
            set(),
            "none",
        ),
        (
            ["vllm", "serve", "zai-org/GLM-5.3", "--pipeline-parallel-size", "8"],
            {},
            "H200",
            "0.30.0",
            set(),
            "stale-topk",
        ),
        (
            ["vllm", "serve", "zai-org/GLM-5.3", "--pipeline-parallel-size", "2"],
            {"VLLM_PP_LAYER_PARTITION": "38,40"},
            "H200",
            "0.30.0",
            set(),
            "none",
        ),
        (
            [
                "vllm",
                "serve",
                "amd/GLM-5.2-MXFP4",
                "-tp",
                "8",
                "--speculative-config",
                '{"method":"mtp","num_speculative_tokens":3}',
            ],
            {},
            "MI355X",
            "0.27.1",
            set(),
            "mtp-zero",
        ),
        (
            [
                "vllm",
                "serve",
                "amd/GLM-5.2-MXFP4",
                "-tp",
                "8",
                "--speculative-config",
                '{"method":"mtp","num_speculative_tokens":3}',
            ],
            {"VLLM_ROCM_USE_AITER_FP4BMM": "0", "VLLM_ROCM_USE_AITER_FP8BMM": "0"},
            "MI355X",
            "0.27.1",
            set(),
            "none",
        ),
    ],
)
def test_the_fault_follows_from_the_launch(
    args: list[str], env: dict[str, str], gpu: str, version: str, patches: set[str], fault: str
) -> None:
    assert fault_of(parse_serve_args(args, env, gpu, version, patches)) == fault


MXFP4_DP8_EP = ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "-dp", "8", "--enable-expert-parallel"]


@pytest.mark.parametrize(
    "version, all2all, patched, marlin, fault, refuses",
    [
        ("0.30.0", "allgather_reducescatter", False, False, "garbled", None),
        ("0.30.0", "deepep_high_throughput", False, False, "garbled", None),
        ("0.30.0", "allgather_reducescatter", True, False, "none", None),
        ("0.30.0", "deepep_high_throughput", True, False, "none", "glmops patch moe-mxfp4-expert-map"),
        ("0.30.0", "deepep_high_throughput", True, True, "none", None),
        ("0.33.0", "allgather_reducescatter", False, False, "none", None),
        ("0.33.0", "deepep_high_throughput", False, False, "none", "CutlassExpertsMxfp4 does not support"),
        ("0.33.0", "flashinfer_nvlink_two_sided", True, True, "none", "glmops patch moe-mxfp4-expert-map"),
    ],
)
def test_unsupported_all_to_all_layouts_stop_the_server_from_0_32_or_with_the_patch(
    version: str, all2all: str, patched: bool, marlin: bool, fault: str, refuses: str | None
) -> None:
    env = {"GLMOPS_MOE_MXFP4_BACKEND": "marlin"} if marlin else {}
    patches = {"moe-mxfp4-expert-map"} if patched else set()
    launch = parse_serve_args([*MXFP4_DP8_EP, "--all2all-backend", all2all], env, "GB200", version, patches)
    error = startup_error(launch)
    assert (error is None) == (refuses is None)
    if refuses is not None:
        assert error is not None and refuses in error
    else:
        assert fault_of(launch) == fault
