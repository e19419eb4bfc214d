"""The patch registry as Markdown (docs/patches.md, written by `glmctl generate`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glmops_vllm_patches.registry import PATCHES
from glmops_vllm_patches.version import PROVEN_VERSIONS, SUPPORTED

_HEAD = """# vLLM patches

Generated from the plugin's registry (`images/vllm-patches/src/glmops_vllm_patches/`) by `glmctl generate`;
do not edit by hand.

The plugin `glmops_vllm_patches` (entry point group `vllm.general_plugins`) is installed in glmops' patched
images. vLLM calls it in every process before the model is built; it applies each patch whose guard allows it
and logs one line per patch (`glmops patch <name> (<issue>) applied|skipped: <why>`). A target missing in a
supported version stops the server: it does not start serving answers the patch was meant to fix.

Supported vLLM versions: {supported}; proven against the sources of {proven}.
Turn one patch off with its switch (`=off`); `VLLM_PLUGINS` without `glmops_vllm_patches` turns all off.

"""


def render_registry_md() -> str:
    out = [_HEAD.format(supported=SUPPORTED, proven=", ".join(PROVEN_VERSIONS))]
    out.append("| patch | issue | vLLM | platforms | switch |\n|---|---|---|---|---|\n")
    for p in PATCHES:
        i = p.info
        out.append(
            f"| [{i.name}](#{i.name}) | [{i.issue}]({i.issue_url}) | {i.affected} | {', '.join(i.platforms)} "
            f"| `{i.env_switch}=off` |\n"
        )
    for p in PATCHES:
        i = p.info
        prs = ", ".join(i.prs) if i.prs else "none"
        out.append(
            f"\n## {i.name}\n\n"
            f"- Upstream: {i.issue_url} (pull requests: {prs})\n"
            f"- Affected: vLLM {i.affected} on {', '.join(i.platforms)}\n"
            f"- Why: {i.why}\n"
            f"- How: {i.how}\n"
            f"- Remove when: {i.remove_when}\n"
        )
    return "".join(out)


_PROOF = """
## Proof on real kernels: vllm-63170 on two GPUs

The tests above prove every patch against the sources of each supported vLLM, and its logic numerically with stub
models on the CPU. `images/vllm-patches/proof/dsa_pp_real.py` shows the upstream failure itself on real vLLM kernels,
and shows it gone with the patch: a GLM-5 DSA model whose layers 3, 4, 5 and 7 reuse the top-k indices of the last
computing layer (`index_topk_freq` 4, `index_skip_topk_offset` 3, as GLM-5.2/5.3), served by vLLM 0.26.0 or later
with pipeline parallelism 2. Each run is compared with PP=1 (its maximum absolute difference of prompt logprobs,
and whether the greedy tokens are the same), against a noise floor of two PP=1 runs:

- `pp2-default`: vLLM's default split starts stage 2 on a reuse layer (layer 4 of 8; layer 39 of 78): stage 2
  attends with stale indices, so it must differ from PP=1 well beyond the noise floor;
- `pp2-safe`: `VLLM_PP_LAYER_PARTITION` set to the partition glmops' admission proposes (the rule's own
  `balanced_partition`: 2,6 and 38,40): every stage starts on a computing layer, so it must match PP=1;
- `pp2-plugin`: the default split with the glmops plugin loaded by vLLM's plugin loader (only
  `dsa-pp-topk-handoff` on): the rows cross the stage boundary, so it must match PP=1.

Two models: `tiny8` (8 layers, 44.6 M parameters) and `glm78` (GLM-5.x's 78-layer pattern, 341.5 M), both with
seeded weights of standard deviation 0.02 written by `transformers` (vLLM's dummy weights are too uniform to show
the bug), dense MLPs, `kv_lora_rank` 512, RoPE 64, `index_head_dim` 128, `index_topk` 512, and token-id prompts of
1536 tokens, so prefill takes the sparse path.

How to run it on a machine with two GPUs and no network. Here, with network, build the offline bundle (vLLM 0.26.0
pruned to what an H200 loads, and the wheels the machine's image lacks: about 44 MiB, in an ignored folder); there,
install it and run the one command (five vLLM starts per model; a PP=1 start took 27 to 69 s on one H200):

```sh
python images/vllm-patches/proof/bundle.py                 # here: images/vllm-patches/proof/.bundle/
sh images/vllm-patches/proof/.bundle/install.sh /tmp/site   # there, then:
PYTHONPATH=/tmp/site python images/vllm-patches/proof/dsa_pp_real.py --variant all
python images/vllm-patches/proof/dsa_pp_judge.py images/vllm-patches/proof/results/*.json   # exit 0: proven
```

`dsa_pp_real.py --check-env` says what the machine lacks, if anything. Each start runs in its own process; runs
already measured in `--work` (default `$TMPDIR/glmops-dsa-proof`) are reused, so a model can be finished over several
commands (`--runs pp2-safe pp2-plugin`). The results go to `images/vllm-patches/proof/results/<model>.json`: per run
the split, the difference, the tokens, the glmops log lines and the attention backend vLLM logged, plus the GPUs, the
driver, the vLLM, torch and transformers versions and the judge's verdict. Commit them and run `glmctl generate`:
the tables below are written from those files, and `tests/unit/test_proof_dsa_pp.py` re-judges every committed file.

Every run pins vLLM's `FLASHMLA_SPARSE` attention backend (on Hopper vLLM would list `FLASH_ATTN_MLA_SPARSE`
first), so all runs use DeepSeek's FlashMLA sparse kernels, which read the top-k indices the bug leaves stale.

The bundle (`images/vllm-patches/proof/bundle.py`) changes no code. Every CUDA fat binary in vLLM's wheel keeps its
sm_90 cubins, which an H200 loads ahead of any PTX; the other architectures' cubins and all PTX go, and a module
without an sm_90 cubin is left empty, so a kernel that would have run JIT-compiled PTX fails to launch instead ("no
kernel image is available", as FlashAttention 2 does on an H200 with the bundle). Files whose code the path never
runs are dropped: FlashAttention 3 (vLLM then reports it unavailable; the backend is pinned), the Rust front end,
Blackwell-only kernels, DeepGEMM for other Pythons. Its
`MANIFEST.json` lists every file dropped and every image removed. `images/vllm-patches/proof/requirements-gpu.txt`
lists what the proof and vLLM's offline path import (read from vLLM 0.26.0's source, and llguidance and xgrammar
found on the machine): {offline}; the bundle pins those the image lacks, with their dependencies.
"""

_NOT_MEASURED = """
### Measured results: PP=2

> **Not measured yet.** No result file is committed under `images/vllm-patches/proof/results/`. This section is
> written from those files by `glmctl generate`; no figure here is typed by hand.
"""

_PARTIAL = """
### Measured so far: PP=1 on one GPU

Not the proof: the PP=2 runs need two GPUs, and the judge fails these files for that. What one GPU shows is the noise
floor on real kernels, the maximum absolute difference of prompt logprobs between two PP=1 runs of the same model
(`images/vllm-patches/proof/results/pp1-one-gpu/`). Greedy tokens are not reproducible there: two PP=1 runs part
within the first ten generated tokens, and so do two batches in one process (`repeat.log` beside the files, from
`dsa_pp_repeat.py`). The judge therefore compares tokens only where the two PP=1 runs agree, and decides on the
prompt logprobs.

| model | layers | GPUs | vLLM, torch | noise floor | per prompt | same tokens | match limit | differ limit | runs, s |
|---|---|---|---|---|---|---|---|---|---|
"""


def _figure(value: object) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def _result_md(doc: Mapping[str, Any]) -> str:
    machine, versions, verdict = doc.get("machine", {}), doc.get("versions", {}), doc.get("verdict", {})
    gpus = machine.get("gpus", [])
    names = sorted({g.get("name", "?") for g in gpus})
    head = (
        f"\n#### `{doc.get('variant')}`: {doc['model']['layers']} layers, computing layers "
        f"{', '.join(map(str, doc['model']['computing_layers']))}\n\n"
        f"{len(gpus)} x {' + '.join(names)} (CUDA {machine.get('cuda')}, driver {machine.get('driver')}); "
        f"vLLM {versions.get('vllm')}, torch {versions.get('torch')}, transformers {versions.get('transformers')}; "
        f"glmops {versions.get('glmops_commit') or 'working tree'}. Noise floor (PP=1 twice): "
        f"{_figure(verdict.get('noise_floor'))}. Verdict: **{'pass' if verdict.get('passed') else 'FAIL'}**.\n\n"
        "| run | split | stage 2 starts on | plugin | max abs difference of prompt logprobs | generated tokens |\n"
        "|---|---|---|---|---|---|\n"
    )
    computing = set(doc["model"]["computing_layers"])
    rows = []
    for run in doc.get("runs", []):
        starts = run.get("stage_starts", [])[1:]
        start = ", ".join(f"{s} ({'computes' if s in computing else 'reuse'})" for s in starts) or "-"
        if run.get("error"):
            tokens = f"error: {str(run['error']).splitlines()[0]}"
        elif run.get("tokens_identical") is None:
            tokens = "reference"
        elif run["tokens_identical"]:
            tokens = "identical"
        else:
            tokens = f"differ from token {run.get('first_differing_token')}"
        split, plugin = ",".join(map(str, run.get("split", []))), "yes" if run.get("plugin") else "no"
        diff = _figure(run.get("max_abs_logprob_diff"))
        rows.append(f"| {run['name']} | {split} | {start} | {plugin} | {diff} | {tokens} |\n")
    problems = "".join(f"- {p}\n" for p in verdict.get("problems", []))
    return head + "".join(rows) + (f"\nWhat the judge found:\n\n{problems}" if problems else "")


def _partial_row(doc: Mapping[str, Any]) -> str:
    machine, versions, verdict = doc.get("machine", {}), doc.get("versions", {}), doc.get("verdict", {})
    gpus = machine.get("gpus", [])
    runs = {run["name"]: run for run in doc.get("runs", [])}
    noise = runs.get("pp1-b", {})
    per_prompt = ", ".join(_figure(x) for x in noise.get("per_prompt_max_abs_logprob_diff") or [])
    reproducible = {True: "yes", False: f"no (from token {noise.get('first_differing_token')})", None: "-"}
    starts = " / ".join(_figure(runs.get(name, {}).get("seconds")) for name in ("pp1-a", "pp1-b"))
    return (
        f"| `{doc.get('variant')}` | {doc['model']['layers']} | {len(gpus)} x "
        f"{' + '.join(sorted({g.get('name', '?') for g in gpus}))} (driver {machine.get('driver')}) "
        f"| {versions.get('vllm')}, {versions.get('torch')} | {_figure(verdict.get('noise_floor'))} | {per_prompt} "
        f"| {reproducible[verdict.get('tokens_reproducible')]} | {_figure(verdict.get('same_limit'))} "
        f"| {_figure(verdict.get('differs_limit'))} | {starts} |\n"
    )


def render_proof_md(
    results: Sequence[Mapping[str, Any]], offline: Sequence[str] = (), partial: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The real-kernel proof section, its figures written from the committed result files only: `results` hold the
    whole proof (PP=1 and PP=2), `partial` the PP=1 runs one GPU could make."""
    out = _PROOF.format(offline=", ".join(f"`{name}`" for name in offline) or "see `--check-env`")
    if partial:
        out += _PARTIAL + "".join(_partial_row(doc) for doc in partial)
    if not results:
        return out + _NOT_MEASURED
    return out + "\n### Measured results: PP=2\n" + "".join(_result_md(doc) for doc in results)
