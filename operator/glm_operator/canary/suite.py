"""Run the canary suite against one OpenAI-compatible endpoint (one pod, or any server)."""

from __future__ import annotations

from dataclasses import dataclass, field

from glm_operator.api.v1alpha1 import CanarySpec
from glm_operator.canary import checks
from glm_operator.canary.client import OpenAIClient
from glm_operator.canary.gsm8k import Gsm8kRun, run_gsm8k
from glm_operator.canary.gsm8k_data import Item, generate
from glm_operator.canary.progress import CheckProgress, Progress, emit
from glm_operator.canary.results import CheckResult, SuiteResult

SUITES = ("smoke", "gsm8k", "null-content", "copy", "spec-decode", "logprob")
DEFAULT_GSM8K_THRESHOLD = 0.82  # vLLM CI's 0.90 for GLM-5.2-NVFP4 configs, minus its 0.08 margin
DEFAULT_GSM8K_EXPECTED = 0.93  # GLM-5.x's own GSM8K level


@dataclass
class SuiteInputs:
    config: CanarySpec = field(default_factory=CanarySpec)
    questions: list[Item] = field(default_factory=lambda: generate(200, seed=1))
    shots: list[Item] = field(default_factory=lambda: generate(5, seed=2))
    speculative: bool = False
    gsm8k_threshold: float = DEFAULT_GSM8K_THRESHOLD
    gsm8k_expected: float = DEFAULT_GSM8K_EXPECTED
    only: tuple[str, ...] = SUITES
    # Suites a person asked for by name: one that cannot run is a failed check saying why, never dropped.
    asked: tuple[str, ...] = ()
    # Why the server's /metrics could not be read, when it could not (a gateway in front of vLLM may not serve it).
    metrics_error: str | None = None


async def run_suite(client: OpenAIClient, inputs: SuiteInputs, progress: Progress | None = None) -> SuiteResult:
    """Every check the inputs ask for, in order; `progress` hears each check's figures as they come."""
    cfg, result = inputs.config, SuiteResult()
    spec_on = inputs.speculative and cfg.spec_decode.enabled and "spec-decode" in inputs.only
    for name, reason in _cannot_run(inputs).items():
        if name in inputs.asked:
            result.checks.append(CheckResult(name, False, None, None, f"asked for by name but cannot run: {reason}"))
        elif name in inputs.only:
            result.skipped[name] = reason
    before = checks.spec_counters(await client.metrics()) if spec_on else {}

    async def step(name: str) -> None:
        """A check that asks no scored questions: named as the one running, with no figures."""
        await emit(progress, CheckProgress(name, 0, 0))

    concurrency = cfg.gsm8k.concurrency
    if cfg.smoke.enabled and "smoke" in inputs.only:
        result.checks.append(await checks.smoke(client, cfg.smoke.samples, concurrency, progress))
    if cfg.gsm8k.enabled and "gsm8k" in inputs.only:
        threshold = cfg.gsm8k.threshold if cfg.gsm8k.threshold is not None else inputs.gsm8k_threshold
        run = Gsm8kRun(threshold, cfg.gsm8k.max_questions, inputs.gsm8k_expected, cfg.gsm8k.concurrency, cfg.gsm8k.chat)
        result.checks.extend(await run_gsm8k(client, inputs.questions, inputs.shots, run, progress))
    if cfg.null_content.enabled and "null-content" in inputs.only:
        null = cfg.null_content
        result.checks.append(await checks.null_content(client, null.samples, null.max_rate, concurrency, progress))
    if cfg.copy_fidelity.enabled and "copy" in inputs.only:
        result.checks.append(await checks.copy_fidelity(client, cfg.copy_fidelity.trials, concurrency, progress))
    if cfg.logprob.enabled and cfg.logprob.reference is not None and "logprob" in inputs.only:
        await step("logprob")
        result.checks.append(await checks.logprob(client, cfg.logprob.reference, cfg.logprob.tolerance))
    if spec_on:
        await step("spec-decode")
        after = checks.spec_counters(await client.metrics())
        result.checks.append(checks.acceptance(before, after, cfg.spec_decode.min_acceptance))
    return result


def _cannot_run(inputs: SuiteInputs) -> dict[str, str]:
    """Each suite that this configuration and server leave out, with the reason."""
    cfg = inputs.config
    reasons = {
        name: "turned off in the canary configuration"
        for name, check in (
            ("smoke", cfg.smoke),
            ("gsm8k", cfg.gsm8k),
            ("null-content", cfg.null_content),
            ("copy", cfg.copy_fidelity),
            ("spec-decode", cfg.spec_decode),
            ("logprob", cfg.logprob),
        )
        if not check.enabled
    }
    if cfg.logprob.enabled and cfg.logprob.reference is None:
        reasons["logprob"] = "no reference mean NLL for this model (spec.canary.logprob.reference)"
    if inputs.metrics_error is not None:
        reasons.setdefault(
            "spec-decode", f"it reads the server's /metrics, which could not be read: {inputs.metrics_error}"
        )
    if not inputs.speculative:
        reasons.setdefault(
            "spec-decode", "the server exports no vllm:spec_decode_* counters (speculative decoding is off)"
        )
    return reasons
