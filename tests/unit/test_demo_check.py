"""hack/demo_check.py: the demo fails when what it shows breaks a promise its summary makes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_check", ROOT / "hack/demo_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo_check = _load_checker()
REFUSAL = "admission webhook denied: spec.parallelism.pipeline: 8: stale top-k (rule dsa-pp-topk-reuse, ...). Fix."


def manifest(name: str, fault: bool = False) -> dict[str, Any]:
    annotations = {demo_check.FAULT_ANNOTATION: "mtp-zero"} if fault else {}
    return {"kind": "GLMDeployment", "metadata": {"name": name, "annotations": annotations}}


def glmd(
    name: str, replicas: int = 1, ready: int = 1, passed: bool = True, repairs: int = 0, failed: str = "spec-decode"
) -> dict[str, Any]:
    report = {"passed": passed, "failed": [] if passed else [failed], "message": "figures"}
    status = {
        "readyReplicas": ready,
        "canary": {"pods": {f"{name}-0": report}},
        "remediations": [{"rule": "dsa-pp-topk-reuse"}] * repairs,
    }
    return {"metadata": {"name": name}, "spec": {"replicas": replicas}, "status": status}


def pod(name: str, phase: str) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "message": "0/20 nodes are available"}]
    status = {"phase": phase, "conditions": conditions if phase == "Pending" else []}
    return {"metadata": {"name": name}, "status": status}


MANIFESTS = {
    "x-broken.yaml": manifest("x-broken"),
    "x-fixed.yaml": manifest("x-fixed"),
    "x-auto.yaml": manifest("x-auto"),
    "unknown-failure.yaml": manifest("unknown", fault=True),
}
OUTCOMES = {
    "x-broken.yaml": ("refused", REFUSAL),
    "x-fixed.yaml": ("accepted", "created"),
    "x-auto.yaml": ("accepted", "created"),
    "unknown-failure.yaml": ("accepted", "created"),
}
GLMDS = [glmd("x-fixed"), glmd("x-auto", repairs=1), glmd("unknown", ready=0, passed=False)]
PODS = [pod("x-fixed-0", "Running"), pod("download-0", "Succeeded")]


def test_a_demo_that_kept_every_promise_has_nothing_to_report() -> None:
    assert demo_check.broken_promises(MANIFESTS, OUTCOMES, GLMDS, PODS) == []


@pytest.mark.parametrize(
    "outcomes, glmds, pods, expected",
    [
        ({"x-broken.yaml": ("accepted", "created")}, GLMDS, PODS, "x-broken.yaml: accepted, expected refused"),
        ({"x-fixed.yaml": ("refused", REFUSAL)}, GLMDS, PODS, "x-fixed.yaml: refused, expected accepted"),
        ({"x-broken.yaml": ("refused", "Internal error")}, GLMDS, PODS, "refused without naming its rule"),
        ({}, [GLMDS[0], glmd("x-auto"), GLMDS[2]], PODS, "status.remediations records no repair"),
        ({}, [glmd("x-fixed", ready=0, passed=False), *GLMDS[1:]], PODS, "x-fixed: 0 of 1 replicas serve"),
        ({}, [glmd("x-fixed", replicas=2, ready=1), *GLMDS[1:]], PODS, "x-fixed: 1 of 2 replicas serve"),
        ({}, [*GLMDS[:2], glmd("unknown", ready=1, passed=True)], PODS, "the gate let it in"),
        ({}, [*GLMDS[:2], glmd("unknown", ready=0, passed=True)], PODS, "no canary failed on its answers"),
        ({}, [*GLMDS[:2], glmd("unknown", ready=0, passed=False, failed="unreachable")], PODS, "on its answers yet"),
        ({}, GLMDS[1:], PODS, "GLMDeployment x-fixed is not in the cluster"),
        ({}, GLMDS, [*PODS, pod("x-fixed-1", "Pending")], "pod x-fixed-1: Pending (0/20 nodes are available)"),
    ],
    ids=[
        "broken-sample-accepted",
        "fixed-sample-refused",
        "refusal-without-rule",
        "auto-without-repair",
        "deployment-not-serving",
        "one-replica-short",
        "broken-on-purpose-serves",
        "broken-on-purpose-without-verdict",
        "broken-on-purpose-only-unreachable",
        "deployment-missing",
        "pod-pending",
    ],
)
def test_each_broken_promise_is_named(
    outcomes: dict[str, tuple[str, str]], glmds: list[Any], pods: list[Any], expected: str
) -> None:
    problems = demo_check.broken_promises(MANIFESTS, {**OUTCOMES, **outcomes}, glmds, pods)
    assert any(expected in p for p in problems), problems


def test_main_exits_1_and_prints_each_broken_promise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x-fixed.yaml").write_text("kind: GLMDeployment\nmetadata: {name: x-fixed}\n")
    (tmp_path / "outcomes.tsv").write_text("x-fixed.yaml\taccepted\tcreated\n")
    (tmp_path / "glmds.json").write_text('{"items": []}')
    (tmp_path / "pods.json").write_text('{"items": []}')
    files = [str(tmp_path / f) for f in ("outcomes.tsv", "glmds.json", "pods.json", "x-fixed.yaml")]
    assert demo_check.main(files) == 1
    out = capsys.readouterr().out
    assert "BROKEN PROMISE: x-fixed.yaml: accepted, but GLMDeployment x-fixed is not in the cluster" in out
