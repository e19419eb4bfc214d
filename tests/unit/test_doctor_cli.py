"""`glmctl doctor` as a user runs it, with a fake snapshot source: its text, its JSON and its exit codes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from glm_operator.catalog import AcceleratorCatalog
from glm_operator.cli.doctor import doctor
from glm_operator.cli.main import build_parser
from glm_operator.doctor.facts import Options, Snapshot
from glm_operator.k8s.doctor import ClusterUnreachable
from tests.unit.test_doctor_checks import installed


def run(argv: list[str], snapshot: Snapshot | Exception, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    asked: dict[str, Any] = {}

    def gather(opts: Options, catalog: AcceleratorCatalog, kubeconfig: str | None, context: str | None) -> Snapshot:
        asked.update(opts=opts, kubeconfig=kubeconfig, context=context)
        if isinstance(snapshot, Exception):
            raise snapshot
        return snapshot

    code = doctor(build_parser().parse_args(["doctor", *argv]), gather)
    out, err = capsys.readouterr()
    run.asked = asked  # type: ignore[attr-defined]
    return code, out, err


def test_a_healthy_cluster_exits_0_with_every_check_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([], installed(), capsys)
    assert code == 0
    assert out.splitlines()[-1] == "0 problems, 0 warnings"
    assert out.startswith("ok       kubernetes-version: Kubernetes version: v1.36.3: ")


def test_a_problem_exits_1_and_is_printed_with_its_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--multi-node"], installed(), capsys)
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("PROBLEM"))
    assert "leaderworkerset: LeaderWorkerSet API" in line and "kubectl apply --server-side" in line


def test_warnings_alone_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([], replace(installed(), storage_classes=()), capsys)
    assert code == 0 and out.splitlines()[-1] == "0 problems, 1 warnings"


def test_json_output_lists_each_finding_with_its_level_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["-o", "json", "--monitoring"], installed(), capsys)
    report = json.loads(out)
    assert code == 1 and report["problems"] == 1
    (monitoring,) = [f for f in report["findings"] if f["check"] == "monitoring"]
    assert monitoring["level"] == "problem" and "prometheus-operator" in monitoring["fix"]


def test_an_unreachable_cluster_exits_2_with_the_reason_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        ["--kubeconfig", "k.yaml"], ClusterUnreachable("API server: https://h: no answer (refused)"), capsys
    )
    assert (code, out) == (2, "")
    assert err.startswith("API server: https://h: no answer (refused). Check --kubeconfig")


def test_the_flags_reach_the_snapshot_source(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--kubeconfig", "k.yaml", "--context", "c", "-n", "ops", "--release", "r", "--multi-node", "--monitoring"]
    run(argv, installed(), capsys)
    asked = run.asked  # type: ignore[attr-defined]
    assert asked["opts"] == Options("ops", "r", multi_node=True, monitoring=True)
    assert (asked["kubeconfig"], asked["context"]) == ("k.yaml", "c")


def test_a_bad_namespace_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["doctor", "-n", "Not_A_Namespace"])
    assert exit_.value.code == 2
