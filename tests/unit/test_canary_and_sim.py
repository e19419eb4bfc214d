"""The canaries against the simulator on a real socket: healthy passes, each failure signature fails."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from glm_operator.api.v1alpha1 import CanarySpec
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.gsm8k import last_integer
from glm_operator.canary.gsm8k_data import generate, parse_jsonl, solve_generated
from glm_operator.canary.suite import SuiteInputs, run_suite
from glm_operator.catalog.accelerators import load_accelerators
from glm_operator.catalog.images import load_images
from glm_operator.catalog.versions import Version
from glm_operator.cli.canary_cmd import sim
from glm_operator.sim.behaviour import Model
from glm_operator.sim.faults import Launch, fault_of, parse_serve_args, pp_layer_split, startup_error
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
        # Right numbers said until max_tokens: once passed smoke and GSM8K, read by their last number.
        (("repeat", 0), {"smoke", "gsm8k", "null-content", "copy"}),
    ],
    indirect=["endpoint"],
    ids=["healthy", "garbled", "null-content", "stale-topk", "mtp-zero", "repeat"],
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
    assert not result.passed and "0/8 correct" in result.checks[0].detail


@pytest.mark.parametrize("endpoint", [("none", 0)], indirect=True)
async def test_a_healthy_model_passes_gsm8k_without_the_full_set(endpoint: tuple[OpenAIClient, int]) -> None:
    client, _ = endpoint
    result = await run_suite(client, SuiteInputs(only=("gsm8k",)))
    assert result.passed and "24/24 correct" in result.checks[0].detail and "decided early" in result.checks[0].detail


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


def test_generated_problems_are_solvable_and_deterministic() -> None:
    items = generate(50, seed=7)
    assert items == generate(50, seed=7)
    assert all(str(solve_generated(i.question)) == i.label for i in items)


# The simulator's failure table (sim/faults.py), held to what vLLM's sources do. A launch is built from the same
# `vllm serve` line a pod runs; the tests read what a user sees: the error vLLM stops with, or the signature it serves.


def _launch(
    model: str,
    *flags: str,
    gpu: str = "H200",
    version: str = "0.33.0",
    env: dict[str, str] | None = None,
    patches: tuple[str, ...] = (),
) -> Launch:
    return parse_serve_args(["vllm", "serve", model, *flags], env or {}, gpu, version, set(patches))


def _shows(launch: Launch) -> str:
    """`stops: <error>` for a launch that never serves, else the failure signature it serves with."""
    error = startup_error(launch)
    return f"stops: {error}" if error is not None else fault_of(launch)


def _assert_shows(launch: Launch, expected: str) -> None:
    shown = _shows(launch)
    if expected.startswith("stops: "):
        assert shown.startswith("stops: ") and expected.removeprefix("stops: ") in shown, shown
    else:
        assert shown == expected


# vllm-58729: RedHatAI/GLM-5.3-MXFP4 (compressed-tensors W4A4 MXFP4) on SM100 with expert parallelism.
MXFP4 = "RedHatAI/GLM-5.3-MXFP4"
MXFP4_PATCH = "moe-mxfp4-expert-map"
BATCHED_SIZES = "stops: ValueError: max_num_tokens and num_dispatchers should only be set for BatchedExperts"
ONE_SIDED_MXFP4 = "stops: NotImplementedError: flashinfer_nvlink_one_sided dispatch"
CUTLASS_PARALLEL = "stops: ValueError: CutlassExpertsMxfp4 does not support this MoE deployment since kernel does not support parallel config"  # noqa: E501
CUTLASS_BATCHED = "stops: ValueError: CutlassExpertsMxfp4 does not support this MoE deployment since kernel does not support ('batched_experts',) activation format."  # noqa: E501
PATCHED = f"stops: UnsupportedMoEDeployment: --all2all-backend: {{backend}}: the MXFP4 MoE experts cannot take this all-to-all layout with expert parallelism (glmops patch {MXFP4_PATCH})"  # noqa: E501
IMAGES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {  # version, patches, env
    "stock 0.27.1": ("0.27.1", (), {}),
    "stock 0.30.0": ("0.30.0", (), {}),
    "stock 0.31.0": ("0.31.0", (), {}),
    "stock 0.32.0": ("0.32.0", (), {}),
    "stock 0.33.0": ("0.33.0", (), {}),
    "patched 0.30.0, cutlass": ("0.30.0", (MXFP4_PATCH,), {}),
    "patched 0.33.0, cutlass": ("0.33.0", (MXFP4_PATCH,), {"GLMOPS_MOE_MXFP4_BACKEND": "cutlass"}),
    "patched 0.30.0, marlin": ("0.30.0", (MXFP4_PATCH,), {"GLMOPS_MOE_MXFP4_BACKEND": "marlin"}),
    "patched 0.33.0, marlin": ("0.33.0", (MXFP4_PATCH,), {"GLMOPS_MOE_MXFP4_BACKEND": " Marlin "}),
}
ALL2ALL = (
    "allgather_reducescatter",
    "deepep_high_throughput",
    "flashinfer_nvlink_two_sided",
    "flashinfer_all2allv",
    "flashinfer_nvlink_one_sided",
    "deepep_low_latency",
    "nixl_ep",
    "pplx",  # removed: vLLM falls back to allgather_reducescatter
    "naive",  # removed, likewise
)
_STOCK_OLD = ("garbled",) * 4 + (ONE_SIDED_MXFP4, BATCHED_SIZES, BATCHED_SIZES, "garbled", "garbled")
_STOCK_NEW = ("none",) + (CUTLASS_PARALLEL,) * 4 + (CUTLASS_BATCHED, CUTLASS_BATCHED, "none", "none")
_CUTLASS = ("none",) + (PATCHED,) * 6 + ("none", "none")
_MARLIN = ("none", "none", PATCHED, PATCHED, "none", PATCHED, PATCHED, "none", "none")
# Data 8 with expert parallelism: vLLM builds the all-to-all kernels of the backend asked for (one column each).
WITH_ALL2ALL_KERNELS = {
    "stock 0.27.1": _STOCK_OLD,
    "stock 0.30.0": _STOCK_OLD,
    "stock 0.31.0": _STOCK_OLD,
    "stock 0.32.0": _STOCK_NEW,
    "stock 0.33.0": _STOCK_NEW,
    "patched 0.30.0, cutlass": _CUTLASS,
    "patched 0.33.0, cutlass": _CUTLASS,
    "patched 0.30.0, marlin": _MARLIN,
    "patched 0.33.0, marlin": _MARLIN,
}


@pytest.mark.parametrize(
    "image, all2all, expected",
    [
        (image, a2a, shown)
        for image, row in WITH_ALL2ALL_KERNELS.items()
        for a2a, shown in zip(ALL2ALL, row, strict=True)
    ],
)
def test_mxfp4_on_gb200_with_data_8_and_expert_parallel_follows_the_all_to_all_backend(
    image: str, all2all: str, expected: str
) -> None:
    version, patches, env = IMAGES[image]
    flags = ("-dp", "8", "--enable-expert-parallel", "--all2all-backend", all2all)
    _assert_shows(
        _launch(MXFP4, *flags, gpu="GB200", version=version, env=env, patches=patches),
        expected.format(backend=all2all),
    )


@pytest.mark.parametrize("all2all", ALL2ALL)
@pytest.mark.parametrize("image", IMAGES)
def test_mxfp4_with_tensor_only_expert_parallel_builds_no_all_to_all_so_the_backend_is_unused(
    image: str, all2all: str
) -> None:
    version, patches, env = IMAGES[image]
    flags = ("-tp", "8", "--enable-expert-parallel", "--all2all-backend", all2all)
    launch = _launch(MXFP4, *flags, gpu="GB200", version=version, env=env, patches=patches)
    _assert_shows(launch, "garbled" if not patches and Version.parse(version) < Version.parse("0.32.0") else "none")


@pytest.mark.parametrize(
    "gpu, flags, expected",
    [
        ("GB200", ("-tp", "4", "-dp", "2", "--enable-expert-parallel"), "garbled"),
        ("B200", ("-dp", "8", "--enable-expert-parallel"), "garbled"),
        ("GB300", ("-dp", "4", "--enable_expert_parallel"), "garbled"),
        ("B300", ("--data-parallel-size=8", "-ep"), "garbled"),
        ("H200", ("-dp", "8", "--enable-expert-parallel"), "none"),  # no CUTLASS MXFP4 experts off SM100
        ("RTX-PRO-6000", ("-dp", "8", "--enable-expert-parallel"), "none"),
        ("GB200", ("--enable-expert-parallel",), "none"),  # one GPU: vLLM silently drops EP
        ("GB200", ("-dp", "8"), "none"),  # no EP: every rank holds every expert
        # pipeline stages do not count towards EP: not garbled (stage 1 still starts on a top-k reuse layer)
        ("GB200", ("-pp", "2", "--enable-expert-parallel"), "stale-topk"),
    ],
)
def test_mxfp4_misroutes_on_vllm_0_30_only_with_expert_parallel_on_sm100(
    gpu: str, flags: tuple[str, ...], expected: str
) -> None:
    _assert_shows(_launch(MXFP4, *flags, gpu=gpu, version="0.30.0"), expected)


ROCM_GPUS = [name for name, acc in load_accelerators().accelerators.items() if acc.platform == "rocm"]


def test_the_simulator_knows_the_catalogs_amd_gpus() -> None:
    assert {"MI300X", "MI355X"} <= set(ROCM_GPUS)


@pytest.mark.parametrize(
    "flags, patches",
    [
        (("-tp", "8"), ()),
        (("-dp", "8", "--enable-expert-parallel"), ()),
        (("-tp", "8", "--enable-expert-parallel"), (MXFP4_PATCH,)),
    ],
    ids=["tp8", "dp8-ep", "tp8-ep-patched"],
)
@pytest.mark.parametrize("version", load_images().versions)
@pytest.mark.parametrize("gpu", ROCM_GPUS)
def test_compressed_tensors_mxfp4_on_rocm_stops_after_loading_on_every_version(
    gpu: str, version: str, flags: tuple[str, ...], patches: tuple[str, ...]
) -> None:
    _assert_shows(_launch(MXFP4, *flags, gpu=gpu, version=version, patches=patches), "stops: gptq_marlin_repack")


def test_amds_own_mxfp4_checkpoint_is_not_the_compressed_tensors_one_and_starts_on_rocm() -> None:
    assert startup_error(_launch("amd/GLM-5.2-MXFP4", "-tp", "8", gpu="MI355X", version="0.30.0")) is None


# vllm-52833: MTP on gfx950 with a BF16 kv_b_proj that AITER re-quantizes for its FP4/FP8 BMM.
MTP = ("-tp", "8", "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}')
AITER = {"VLLM_ROCM_USE_AITER": "1"}


@pytest.mark.parametrize(
    "version, env, expected",
    [
        ("0.30.0", AITER, "mtp-zero"),  # both BMM switches default on below 0.33.0
        ("0.32.0", AITER, "mtp-zero"),
        ("0.33.0", AITER, "none"),  # ... and off from 0.33.0
        ("0.33.0", {**AITER, "VLLM_ROCM_USE_AITER_FP4BMM": "1"}, "mtp-zero"),
        ("0.33.0", {**AITER, "VLLM_ROCM_USE_AITER_FP8BMM": "true"}, "mtp-zero"),
        ("0.30.0", {}, "none"),  # the master switch defaults off
        ("0.30.0", {"VLLM_ROCM_USE_AITER": "0"}, "none"),
        ("0.30.0", {"VLLM_ROCM_USE_AITER": "yes"}, "none"),
        ("0.30.0", {"VLLM_ROCM_USE_AITER": "TRUE"}, "mtp-zero"),
        ("0.30.0", {"VLLM_ROCM_USE_AITER": "True"}, "mtp-zero"),
        *[
            ("0.30.0", {**AITER, "VLLM_ROCM_USE_AITER_FP4BMM": off, "VLLM_ROCM_USE_AITER_FP8BMM": off}, "none")
            for off in ("0", "false", "False", "no", "", " 1")  # vLLM does not strip: " 1" is off
        ],
        ("0.30.0", {**AITER, "VLLM_ROCM_USE_AITER_FP4BMM": "1", "VLLM_ROCM_USE_AITER_FP8BMM": "0"}, "mtp-zero"),
        ("0.30.0", {**AITER, "VLLM_ROCM_USE_AITER_FP4BMM": "0", "VLLM_ROCM_USE_AITER_FP8BMM": "TRUE"}, "mtp-zero"),
        ("0.30.0", {**AITER, "VLLM_ROCM_USE_AITER_FP4BMM": "0"}, "mtp-zero"),  # FP8 BMM still on by default
    ],
)
def test_mtp_zero_follows_vllms_reading_of_the_aiter_switches(version: str, env: dict[str, str], expected: str) -> None:
    _assert_shows(_launch("amd/GLM-5.2-MXFP4", *MTP, gpu="MI355X", version=version, env=env), expected)


@pytest.mark.parametrize(
    "model, gpu, spec, patches, env, expected",
    [
        ("amd/GLM-5.2-MXFP4", "MI355X", "mtp", (), {}, "mtp-zero"),  # BF16 MLA in an MXFP4 checkpoint
        ("zai-org/GLM-5.2", "MI355X", "mtp", (), {}, "mtp-zero"),  # BF16 checkpoints
        ("zai-org/GLM-5.3-BF16", "MI355X", "mtp", (), {}, "mtp-zero"),
        ("zai-org/GLM-5", "MI355X", "mtp", (), {}, "mtp-zero"),
        ("zai-org/GLM-5.1", "MI355X", "glm4_moe_mtp", (), {}, "mtp-zero"),  # vLLM reads *_mtp as mtp
        ("zai-org/GLM-5.3", "MI355X", "mtp", (), {}, "none"),  # FP8-block: kv_b_proj is FP8
        ("zai-org/GLM-5.2-FP8", "MI355X", "mtp", (), {}, "none"),
        ("zai-org/GLM-5.2", "MI300X", "mtp", (), {}, "none"),  # gfx942
        ("zai-org/GLM-5.2", "H200", "mtp", (), {}, "none"),
        ("zai-org/GLM-5.2", "MI355X", "ngram", (), {}, "none"),
        ("zai-org/GLM-5.2", "MI355X", "mtp", ("rocm-mla-bf16-bmm",), {}, "none"),
        # the patch keeps a BMM kernel the user switched on explicitly
        ("zai-org/GLM-5.2", "MI355X", "mtp", ("rocm-mla-bf16-bmm",), {"VLLM_ROCM_USE_AITER_FP8BMM": "1"}, "mtp-zero"),
    ],
)
def test_mtp_zero_needs_a_bf16_kv_b_proj_on_gfx950_and_no_patch(
    model: str, gpu: str, spec: str, patches: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    flags = ("-tp", "8", "--speculative-config", f'{{"method":"{spec}","num_speculative_tokens":3}}')
    _assert_shows(_launch(model, *flags, gpu=gpu, version="0.30.0", env={**AITER, **env}, patches=patches), expected)


def test_a_launch_without_speculative_decoding_never_shows_mtp_zero() -> None:
    _assert_shows(_launch("zai-org/GLM-5.2", "-tp", "8", gpu="MI355X", version="0.30.0", env=AITER), "none")


# vllm-63170: a pipeline stage starting on a top-k reuse layer (GLM-5.2/5.3: 78 layers, top-k on every 4th).
@pytest.mark.parametrize(
    "layers, pp, split",
    [
        (78, 2, [39, 39]),
        (78, 4, [19, 20, 20, 19]),  # remainder 2: stages pp-2 and pp-3
        (78, 8, [9, 10, 10, 10, 10, 10, 10, 9]),
        (78, 9, [8, 8, 9, 9, 9, 9, 9, 9, 8]),
        (11, 4, [3, 3, 3, 2]),  # remainder pp-1 reaches the first stage, never the last
    ],
)
def test_the_default_pipeline_split_gives_the_remainder_to_stages_before_the_last(
    layers: int, pp: int, split: list[int]
) -> None:
    assert pp_layer_split(layers, pp, None) == split


@pytest.mark.parametrize(
    "model, pp, env, patches, expected",
    [
        ("zai-org/GLM-5.3", 8, {}, (), "stale-topk"),
        ("zai-org/GLM-5.3", 2, {}, (), "stale-topk"),  # stage 1 starts on layer 39, a reuse layer
        ("zai-org/GLM-5.3", 2, {"VLLM_PP_LAYER_PARTITION": "38,40"}, (), "none"),  # layer 38 computes
        ("zai-org/GLM-5.3", 8, {}, ("dsa-pp-topk-handoff",), "none"),
        ("zai-org/GLM-5.1", 8, {}, (), "none"),  # every GLM-5.1 layer computes its top-k
    ],
)
def test_stale_topk_follows_where_the_pipeline_stages_start(
    model: str, pp: int, env: dict[str, str], patches: tuple[str, ...], expected: str
) -> None:
    launch = _launch(model, "--pipeline-parallel-size", str(pp), version="0.30.0", env=env, patches=patches)
    _assert_shows(launch, expected)


@pytest.mark.parametrize(
    "version, gpu, expected",
    [("0.33.0", "H200", "stale-topk"), ("0.34.0", "H200", "none"), ("0.34.0", "MI355X", "none")],
)
def test_0_34_sends_the_top_k_to_the_next_stage_on_cuda_and_rocm(version: str, gpu: str, expected: str) -> None:
    _assert_shows(_launch("zai-org/GLM-5.3", "-pp", "2", "-tp", "4", gpu=gpu, version=version), expected)


def test_a_launch_that_stops_wins_over_a_fault_it_would_show() -> None:
    launch = _launch(MXFP4, "-pp", "8", gpu="MI355X", version="0.30.0")
    assert fault_of(launch) == "stale-topk"
    _assert_shows(launch, "stops: gptq_marlin_repack")


def test_glmctl_sim_stops_with_the_error_read_from_its_own_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `glmctl sim fleet` starts each simulator with the pod's env as its process env and the node's GPU as --gpu.
    monkeypatch.setenv("GLMOPS_MOE_MXFP4_BACKEND", "cutlass")
    serve_args = ["vllm", "serve", MXFP4, "-dp", "8", "--enable-expert-parallel", "--all2all-backend", "nixl_ep"]
    code = sim("127.0.0.1", _free_port(), "auto", None, "m", 0, 0, 0.0, "B300", "0.33.0", MXFP4_PATCH, serve_args)
    assert code == 1
    assert "--all2all-backend: nixl_ep" in capsys.readouterr().err


@pytest.mark.parametrize("accuracy, right", [(1.0, 150), (0.93, 140), (0.75, 112), (0.0, 0)])
def test_a_simulated_model_answers_exactly_its_accuracy_share_of_the_gold_questions(
    accuracy: float, right: int
) -> None:
    items = list({item.question: item for item in generate(200, seed=11)}.values())[:150]
    model = Model("none", items, accuracy)
    answers = [last_integer(model.completion(f"Question: {item.question}\nAnswer:")) for item in items]
    assert sum(a == item.label for a, item in zip(answers, items, strict=True)) == right


@pytest.mark.parametrize("endpoint", [("none", 0)], indirect=True)
@pytest.mark.parametrize(
    "suite, reason",
    [
        ("spec-decode", "no vllm:spec_decode_* counters (speculative decoding is off)"),
        ("logprob", "no reference mean NLL"),
    ],
)
async def test_a_suite_asked_for_by_name_that_cannot_run_is_a_failed_check_with_the_reason(
    endpoint: tuple[OpenAIClient, int], suite: str, reason: str
) -> None:
    client, _ = endpoint
    config = CanarySpec()
    config.logprob.enabled = True
    asked = await run_suite(client, SuiteInputs(config=config, only=("smoke", suite), asked=("smoke", suite)))
    assert [(c.name, c.passed) for c in asked.checks] == [(suite, False), ("smoke", True)]
    assert reason in asked.checks[0].detail and not asked.passed
    everything = await run_suite(client, SuiteInputs(config=config, only=("smoke", suite)))
    assert [c.name for c in everything.checks] == ["smoke"] and everything.passed


def test_glmctl_sim_with_the_mtp_zero_fault_serves_speculative_decoding_that_accepts_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import subprocess
    import sys
    import time

    from glm_operator.cli.canary_cmd import canary

    port = _free_port()
    args = [sys.executable, "-m", "glm_operator.cli.main", "sim", "--fault", "mtp-zero", "--port", str(port)]
    server = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        code = canary(f"http://127.0.0.1:{port}", ["smoke", "spec-decode"], None, "json", None, 10)
    finally:
        server.terminate()
        server.wait(10)
    assert code == 1
    spec = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["spec-decode"]
    assert not spec["passed"] and re.match(r"0/[1-9]\d* draft tokens accepted", spec["detail"]), spec


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "other", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
        ({"model": "zai-org/GLM-5.3"}, 400, "body.messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400, "max_tokens"),
        (b"not json", 400, "body.0"),
    ],
    ids=["unknown model", "no messages", "max_tokens 0", "not json"],
)
async def test_the_simulator_refuses_bad_requests_as_vllm_does(body: object, status: int, param: str) -> None:
    import httpx

    client, task = await _started("none")
    try:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        async with httpx.AsyncClient(base_url=client.base_url) as http:
            response = await http.post("/v1/chat/completions", **kwargs)  # type: ignore[arg-type]
        error = response.json()["error"]
        assert (response.status_code, error["code"], error["param"]) == (status, status, param)
        assert set(error) == {"message", "type", "param", "code"}
    finally:
        await client.close()
        task.cancel()
