"""What `make demo` promises, checked against what the cluster shows; exits 1 naming each promise broken.

hack/demo.sh applies every manifest and records whether admission accepted it, then hands this script those
outcomes and the GLMDeployments and pods it reads back. The promises:
  - a `*-broken.yaml` sample is refused with its rule named; every other manifest is accepted;
  - a `*-auto.yaml` sample is accepted with its repairs recorded in status.remediations;
  - no pod of the demo waits Pending (the fleet has room for every sample at once);
  - every accepted GLMDeployment serves (all replicas Ready after their canaries), except one the simulator is
    told to break (annotation sim.glmops.dev/fault), which stays out, its canary failed on its answers.
Usage: demo_check.py OUTCOMES.tsv GLMDEPLOYMENTS.json PODS.json MANIFEST...
OUTCOMES.tsv: one line per manifest, `<file name>\t<accepted|refused>\t<kubectl's message>`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

FAULT_ANNOTATION = "sim.glmops.dev/fault"
UNREACHABLE = "unreachable"  # the failed check of a pod the canary could not ask (render/canary_state.py)


def broken_promises(
    manifests: dict[str, dict[str, Any]], outcomes: dict[str, tuple[str, str]], glmds: list[Any], pods: list[Any]
) -> list[str]:
    """Each promise the demo broke, in words; empty when it kept them all. `manifests` maps file name to manifest."""
    problems = _admission_problems(manifests, outcomes)
    by_name = {g["metadata"]["name"]: g for g in glmds}
    for file, manifest in manifests.items():
        if outcomes.get(file, ("",))[0] != "accepted":
            continue
        name = manifest["metadata"]["name"]
        glmd = by_name.get(name)
        if glmd is None:
            problems.append(f"{file}: accepted, but GLMDeployment {name} is not in the cluster")
            continue
        problems.extend(_serving_problems(file, manifest, glmd))
    for pod in pods:
        if pod.get("status", {}).get("phase") == "Pending":
            problems.append(f"pod {pod['metadata']['name']}: Pending ({_unscheduled_reason(pod)})")
    return problems


def _admission_problems(manifests: dict[str, dict[str, Any]], outcomes: dict[str, tuple[str, str]]) -> list[str]:
    problems = []
    for file in manifests:
        verdict, message = outcomes.get(file, ("missing", ""))
        want = "refused" if file.endswith("-broken.yaml") else "accepted"
        if verdict != want:
            problems.append(f"{file}: {verdict}, expected {want}: {message[:300]}")
        elif verdict == "refused" and "(rule " not in message:
            problems.append(f"{file}: refused without naming its rule: {message[:300]}")
    return problems


def _serving_problems(file: str, manifest: dict[str, Any], glmd: dict[str, Any]) -> list[str]:
    status = glmd.get("status", {})
    name = manifest["metadata"]["name"]
    problems = []
    if file.endswith("-auto.yaml") and not status.get("remediations"):
        problems.append(f"{file}: accepted with remediation Auto, but status.remediations records no repair")
    wanted = glmd.get("spec", {}).get("replicas", 1)
    ready = status.get("readyReplicas") or 0
    reports = list((status.get("canary", {}).get("pods") or {}).values())
    verdicts = [r.get("passed") for r in reports]
    if FAULT_ANNOTATION in manifest["metadata"].get("annotations", {}):
        if ready:
            problems.append(f"{name}: serves {ready} replicas although its simulator is broken; the gate let it in")
        # A pod not yet answering is held out as unreachable; the promise is a verdict on its answers.
        if not any(_failed_on_answers(r) for r in reports):
            messages = [str(r.get("message", ""))[:120] for r in reports]
            problems.append(f"{name}: no canary failed on its answers yet (reports {messages})")
    elif ready < wanted:
        problems.append(f"{name}: {ready} of {wanted} replicas serve (canary verdicts {verdicts})")
    return problems


def _failed_on_answers(report: dict[str, Any]) -> bool:
    """A failed verdict naming a check of the answers, not only that the pod could not be asked."""
    failed = set(report.get("failed") or [])
    return report.get("passed") is False and bool(failed - {UNREACHABLE})


def _unscheduled_reason(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            return str(condition.get("message", "not scheduled"))[:200]
    return "scheduled, not started"


def main(argv: list[str]) -> int:
    outcomes_file, glmds_file, pods_file, *manifest_files = argv
    manifests = {Path(p).name: yaml.safe_load(Path(p).read_text()) for p in manifest_files}
    outcomes = {}
    for line in Path(outcomes_file).read_text().splitlines():
        file, verdict, message = (line.split("\t", 2) + ["", ""])[:3]
        outcomes[file] = (verdict, message)
    glmds = json.loads(Path(glmds_file).read_text())["items"]
    pods = json.loads(Path(pods_file).read_text())["items"]
    problems = broken_promises(manifests, outcomes, glmds, pods)
    for problem in problems:
        print(f"BROKEN PROMISE: {problem}")
    if not problems:
        print(f"Every promise kept: {len(manifests)} manifests, {len(glmds)} GLMDeployments, {len(pods)} pods checked.")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
