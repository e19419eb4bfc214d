"""Decide whether a dsa_pp_real.py result shows vllm-63170 and its two remedies: `python dsa_pp_judge.py FILE...`.

Every run is compared with the PP=1 reference `pp1-a`; a second PP=1 run `pp1-b` measures the noise floor (same
kernels, same GPU, run again). From the recorded split and the model's computing layers (not from any expectation
written in the file) each PP=2 run is expected to:

- differ (the reproduction): a stage after the first starts on a top-k reuse layer and the plugin is not loaded:
  the maximum absolute prompt-logprob difference is at least `DIFFERS_FACTOR` x the noise floor and `DIFFERS_MIN`;
- match: every later stage starts on a computing layer (the safe partition), or the plugin hands the rows over:
  at most `SAME_FACTOR` x the noise floor (or `SAME_MIN`, whichever is larger), and identical generated tokens when
  the two PP=1 runs generate identical tokens.

Greedy tokens are compared only where they are reproducible: on an H200 with vLLM 0.26.0's kernels two PP=1 runs of
these random-weight models already differ within the first ten generated tokens, also within one process
(results/pp1-one-gpu/), so a token difference there says nothing about the pipeline. The prompt logprobs still
decide: the noise floor, the factor between it and a stale top-k, and the limit for a match. They cover the prefill's
forward passes only; where tokens do not reproduce, a hand-off wrong in decode alone is not seen (scoring pp1-a's
generated tokens as a prompt in every run would cover decode positions without reproducible tokens: not done yet).

The result passes only when all five runs are there without error, the noise floor is at most `NOISE_MAX`, the safe
partition is the one admission proposes, the plugin run logged the patch applied and receiving the rows while no
other run loaded any glmops patch, and vLLM is 0.26.0 or later on two or more GPUs: a file with the PP=1 runs alone
(what one GPU can make) always fails. Only the standard library: the verdict can be re-checked anywhere
(tests/unit/test_proof_dsa_pp.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "glmops/dsa-pp-proof/v1"
RUNS = ("pp1-a", "pp1-b", "pp2-default", "pp2-safe", "pp2-plugin")
SAME_FACTOR, SAME_MIN = 3.0, 0.05
DIFFERS_FACTOR, DIFFERS_MIN = 10.0, 0.25
NOISE_MAX = 0.1  # two PP=1 runs further apart than this: the setup is too noisy to tell anything
APPLIED = "glmops patch dsa-pp-topk-handoff (vllm-63170) applied"
RECEIVES = "receives top-k rows"


@dataclass
class Verdict:
    passed: bool
    noise_floor: float | None = None
    same_limit: float | None = None
    differs_limit: float | None = None
    tokens_reproducible: bool | None = None  # did the two PP=1 runs generate the same tokens
    runs: dict[str, str] = field(default_factory=dict)  # run -> "differs" | "same" | "noise" | "reference"
    problems: list[str] = field(default_factory=list)


def expectation(run: Mapping[str, Any], computing: set[int]) -> str:
    if run["pp"] == 1:
        return "reference" if run["name"] == "pp1-a" else "noise"
    starts_on_reuse = any(start not in computing for start in run["stage_starts"][1:])
    return "differs" if starts_on_reuse and not run["plugin"] else "same"


def _release(version: str | None) -> tuple[int, ...]:
    parts = (version or "0").split("+")[0].split(".")[:3]
    return tuple(int(p) if p.isdigit() else 0 for p in parts)


def _machine_problems(doc: Mapping[str, Any]) -> list[str]:
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    vllm = doc.get("versions", {}).get("vllm")
    if _release(vllm) < (0, 26, 0):
        problems.append(f"vLLM {vllm}: the proof needs 0.26.0 or later")
    gpus = len(doc.get("machine", {}).get("gpus", []))
    if gpus < 2:
        problems.append(f"{gpus} GPU(s): PP=2 needs two")
    return problems


def _run_problems(
    run: Mapping[str, Any], expect: str, same: float, differs: float, proposed: Any, tokens: bool
) -> list[str]:
    name, diff = run["name"], run.get("max_abs_logprob_diff")
    logged = run.get("glmops_log", [])
    problems = []
    if run["plugin"]:
        if not any(APPLIED in line for line in logged):
            problems.append(f"{name}: no '{APPLIED}' line: the plugin did not patch this vLLM")
        if not any(RECEIVES in line for line in logged):
            problems.append(f"{name}: no stage logged '{RECEIVES}'")
    elif logged:
        problems.append(f"{name}: glmops patches loaded in a run without the plugin: {logged[0]}")
    if name == "pp2-safe" and run["split"] != proposed:
        problems.append(f"{name}: split {run['split']} is not the partition admission proposes ({proposed})")
    if expect == "reference":
        return problems
    if diff is None:
        return [*problems, f"{name}: no comparison with pp1-a"]
    if expect == "differs" and diff < differs:
        problems.append(f"{name}: expected to differ, but max |d logprob| {diff:.4g} < {differs:.4g}")
    if tokens and expect == "same" and not run.get("tokens_identical"):
        problems.append(f"{name}: generated tokens differ from pp1-a (from token {run.get('first_differing_token')})")
    if expect == "same" and diff > same:
        problems.append(f"{name}: expected to match, but max |d logprob| {diff:.4g} > {same:.4g}")
    return problems


def judge(doc: Mapping[str, Any]) -> Verdict:
    verdict = Verdict(passed=False, problems=_machine_problems(doc))
    runs = {run["name"]: run for run in doc.get("runs", [])}
    missing = [name for name in RUNS if name not in runs or runs[name].get("error")]
    verdict.problems += [f"{name}: {runs[name]['error'] if name in runs else 'absent'}" for name in missing]
    if "pp1-a" in missing or "pp1-b" in missing:
        return verdict
    computing = set(doc["model"]["computing_layers"])
    noise = float(runs["pp1-b"]["max_abs_logprob_diff"])
    verdict.noise_floor = noise
    verdict.tokens_reproducible = bool(runs["pp1-b"].get("tokens_identical"))
    verdict.same_limit = max(SAME_FACTOR * noise, SAME_MIN)
    verdict.differs_limit = max(DIFFERS_FACTOR * noise, DIFFERS_MIN)
    if noise > NOISE_MAX:
        verdict.problems.append(f"the noise floor {noise:.4g} is too high (above {NOISE_MAX}) to judge anything")
    kinds = {name: expectation(run, computing) for name, run in runs.items()}
    verdict.runs = kinds
    for name in ("pp2-default", "pp2-safe", "pp2-plugin"):
        wanted = "same" if name != "pp2-default" else "differs"
        if name in runs and kinds[name] != wanted:
            verdict.problems.append(f"{name}: its split {runs[name]['split']} makes it a '{kinds[name]}' run")
    proposed = doc["model"].get("proposed_partition")
    for name, run in runs.items():
        if name not in missing:
            verdict.problems += _run_problems(
                run, kinds[name], verdict.same_limit, verdict.differs_limit, proposed, verdict.tokens_reproducible
            )
    verdict.passed = not verdict.problems
    return verdict


def main(paths: list[str]) -> int:
    ok = True
    for path in paths:
        with open(path) as f:
            verdict = judge(json.load(f))
        ok &= verdict.passed
        tokens = {True: "reproducible", False: "not reproducible, not compared", None: "-"}[verdict.tokens_reproducible]
        print(f"{path}: {'PASS' if verdict.passed else 'FAIL'} (noise floor {verdict.noise_floor}; tokens {tokens})")
        for problem in verdict.problems:
            print(f"  - {problem}")
    return 0 if ok and paths else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
