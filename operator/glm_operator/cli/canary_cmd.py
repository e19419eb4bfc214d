"""`glmctl canary` and `glmctl sim`: the canaries against any endpoint, and the vLLM simulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from glm_operator.api.v1alpha1 import CanarySpec
from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.gsm8k_data import Item, generate, parse_jsonl
from glm_operator.canary.results import SuiteResult
from glm_operator.canary.suite import SUITES, SuiteInputs, run_suite
from glm_operator.cli import eventloop
from glm_operator.cli.progress_bar import ProgressView

EXIT_PASS, EXIT_FAIL, EXIT_UNREACHABLE = 0, 1, 2
METRICS_SUITES = ("spec-decode",)  # the suites that read the server's /metrics; the others need only the OpenAI API


def load_gsm8k(path: str | None) -> tuple[list[Item], list[Item]]:
    """Questions from a test.jsonl (few-shot examples from train.jsonl beside it), else generated ones."""
    if not path:
        return generate(200, seed=1), generate(5, seed=2)
    questions = parse_jsonl(Path(path).read_text())
    train = Path(path).with_name("train.jsonl")
    shots = parse_jsonl(train.read_text())[:5] if train.is_file() else generate(5, seed=2)
    return questions, shots


def _table(result: SuiteResult) -> str:
    rows = [("CHECK", "RESULT", "VALUE", "THRESHOLD", "DETAIL")]
    for c in result.checks:
        rows.append(
            (
                c.name,
                "pass" if c.passed else "FAIL",
                "-" if c.value is None else f"{c.value:.3f}",
                "-" if c.threshold is None else f"{c.threshold:.3f}",
                c.detail,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    skipped = "".join(f"skipped {name}: {reason}\n" for name, reason in result.skipped.items())
    return "\n".join(lines) + ("\n\n" + skipped if skipped else "\n") + f"\n{'PASSED' if result.passed else 'FAILED'}\n"


async def _canary(
    url: str,
    suites: tuple[str, ...],
    asked: tuple[str, ...],
    gsm8k: str | None,
    output: str,
    model: str | None,
    max_questions: int,
    concurrency: int,
    logprob_reference: float | None,
    timeout: float = 120.0,
) -> int:
    client = OpenAIClient(url, model=model, timeout=timeout)
    try:
        try:
            await client.model_name()
        except EndpointError as err:
            print(f"error: endpoint unreachable: {err}", file=sys.stderr)
            return EXIT_UNREACHABLE
        metrics, metrics_error = "", None
        if any(suite in METRICS_SUITES for suite in suites):
            try:
                metrics = await client.metrics()
            except EndpointError as err:  # an OpenAI-compatible gateway may not serve it: only its suites are left out
                metrics_error = str(err)
        questions, shots = load_gsm8k(gsm8k)
        config = CanarySpec()
        config.gsm8k.max_questions = max_questions
        config.gsm8k.concurrency = concurrency
        config.logprob.reference = logprob_reference
        # Off by default in a GLMDeployment (it needs a per-model reference); asked for here, it runs.
        config.logprob.enabled = logprob_reference is not None or "logprob" in asked
        inputs = SuiteInputs(
            config=config,
            questions=questions,
            shots=shots,
            only=suites,
            asked=asked,
            speculative="vllm:spec_decode_num_draft_tokens_total" in metrics,
            metrics_error=metrics_error,
        )
        progress = ProgressView(sys.stderr)
        try:
            result = await run_suite(client, inputs, progress)
        except EndpointError as err:
            progress.close()
            print(f"error: endpoint failed during the canaries: {err}", file=sys.stderr)
            return EXIT_UNREACHABLE
        progress.close()
        if output == "json":
            print(json.dumps(result.as_dict(), indent=2))
        else:
            sys.stdout.write(_table(result))
        return EXIT_PASS if result.passed else EXIT_FAIL
    finally:
        await client.close()


def canary(
    url: str,
    suites: list[str] | None,
    gsm8k: str | None,
    output: str,
    model: str | None,
    max_questions: int,
    concurrency: int = 64,
    logprob_reference: float | None = None,
    timeout: float = 120.0,
) -> int:
    asked = tuple(suites or ())
    return eventloop.run(
        _canary(
            url, asked or SUITES, asked, gsm8k, output, model, max_questions, concurrency, logprob_reference, timeout
        )
    )


def sim(
    host: str,
    port: int,
    fault: str,
    gsm8k: str | None,
    model: str,
    spec_tokens: int,
    latency_ms: int,
    load_seconds: float,
    gpu: str,
    vllm_version: str,
    patches: str,
    serve_args: list[str],
    accuracy: float = 1.0,
    endpoint_fault: str | None = None,
) -> int:
    from glm_operator.sim.behaviour import Model
    from glm_operator.sim.faults import fault_of, parse_serve_args, startup_error
    from glm_operator.sim.server import Simulator, serve

    if serve_args:
        launch = parse_serve_args(serve_args, dict(os.environ), gpu, vllm_version, {p for p in patches.split(",") if p})
        model = launch.model
        if launch.speculative:
            spec_tokens = int(launch.speculative.get("num_speculative_tokens") or 1)  # type: ignore[call-overload]
        error = startup_error(launch) if fault == "auto" else None
        if error is not None:
            # vLLM exits before it serves: the pod never answers, so its canaries never pass.
            time.sleep(load_seconds)
            print(f"glmctl sim: {launch.model}: {error}", file=sys.stderr, flush=True)
            return 1
        if fault == "auto":
            fault = fault_of(launch)
    if fault == "auto":
        fault = "none"
    if fault == "mtp-zero" and spec_tokens == 0:
        # The signature is zero acceptance of draft tokens: without speculative decoding there are none to count.
        spec_tokens = 1
    gold = parse_jsonl(Path(gsm8k).read_text()) if gsm8k else None
    null_counter = "null-content-metrics" in patches.split(",")
    simulator = Simulator(
        Model(fault, gold, accuracy), model, spec_tokens, latency_ms / 1000, null_counter, endpoint_fault
    )
    broken = f", endpoint fault {endpoint_fault}" if endpoint_fault else ""
    print(
        f"glmctl sim: {model} on {host}:{port}, fault {fault}, MTP tokens {spec_tokens}{broken}",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(simulator, host, port, load_seconds))
    return 0
