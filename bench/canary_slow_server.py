"""`glmctl canary` as a user runs it, against fast, slow, degenerate and broken servers: verdict and time to verdict.

Each case runs `glmctl canary --url ... -o json` in its own process against `glmctl sim` (this checkout's simulator,
its faults and endpoint faults) and records the exit code, the wall time to the verdict, each check's verdict and,
for exit 2, the error line. `--tree DIR` runs the same cases with another checkout's `glmctl` beside this one's (e.g.
`git archive REV operator | tar -x -C DIR`), the two taking turns case by case, for a before and after in one run.

Cases: a healthy 93 % model at 20 ms and at `--slow-ms` (2 s) a request (every suite; GSM8K's 200 questions from
the shared test set), the same with the 58729 symptom of answers that repeat (`--fault repeat`), an endpoint that
answers HTTP 200 with an error object, HTTP 500 for every third request, connections reset mid-body, truncated
JSON, a gateway without `/metrics` asked for smoke, and a hung server (`--timeout 5` where the tree has it).

Target (issue 30): at `--slow-ms`, the healthy and the degenerate cases reach their verdict within 3 round trips of
GSM8K's waves plus one per short suite, i.e. no suite asks one question at a time. Exit 1 if missed.

    PYTHONPATH=operator .venv/bin/python bench/canary_slow_server.py [--slow-ms 2000] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
if not GSM8K.is_dir():
    GSM8K = Path("/work/shared/data/gsm8k")


@dataclass(frozen=True)
class Case:
    name: str
    latency_ms: int
    fault: str = "none"
    endpoint_fault: str | None = None
    suites: tuple[str, ...] = ()
    hang: bool = False


@dataclass
class Outcome:
    code: int
    wall_s: float
    verdicts: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cases(slow_ms: int) -> list[Case]:
    return [
        Case("healthy 93 %, 20 ms", 20),
        Case(f"healthy 93 %, {slow_ms} ms", slow_ms),
        Case("answers that repeat, 20 ms", 20, fault="repeat"),
        Case(f"answers that repeat, {slow_ms} ms", slow_ms, fault="repeat"),
        Case("HTTP 200 with an error object", 20, endpoint_fault="error-200"),
        Case("HTTP 500 for every third request", 20, endpoint_fault="http-500-share"),
        Case("connection reset mid-body", 20, endpoint_fault="reset-mid-body"),
        Case("truncated JSON", 20, endpoint_fault="truncated-json"),
        Case("gateway without /metrics, --suite smoke", 20, endpoint_fault="no-metrics", suites=("smoke",)),
        Case("hung server", 20, endpoint_fault="hang", hang=True),
    ]


def run(case: Case, tree: Path) -> Outcome:
    port = _free_port()
    sim_argv = [sys.executable, "-m", "glm_operator.cli.main", "sim", "--port", str(port), "--fault", case.fault]
    sim_argv += ["--latency-ms", str(case.latency_ms), "--gsm8k", str(GSM8K / "test.jsonl"), "--accuracy", "0.93"]
    if case.endpoint_fault:
        sim_argv += ["--endpoint-fault", case.endpoint_fault]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    sim = subprocess.Popen(sim_argv, env=env, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port)
        argv = [sys.executable, "-m", "glm_operator.cli.main", "canary", "--url", f"http://127.0.0.1:{port}"]
        argv += ["--gsm8k", str(GSM8K / "test.jsonl"), "-o", "json"]
        argv += [arg for suite in case.suites for arg in ("--suite", suite)]
        help_text = subprocess.run(
            [sys.executable, "-m", "glm_operator.cli.main", "canary", "--help"],
            env={**os.environ, "PYTHONPATH": str(tree / "operator")},
            capture_output=True,
            text=True,
        ).stdout
        if case.hang and "--timeout" in help_text:
            argv += ["--timeout", "5"]
        started = time.monotonic()
        done = subprocess.run(
            argv, env={**os.environ, "PYTHONPATH": str(tree / "operator")}, capture_output=True, text=True, timeout=600
        )
        wall = time.monotonic() - started
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    return Outcome(done.returncode, wall, _verdicts(done))


def _wait_listening(port: int) -> None:
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"glmctl sim on port {port} did not start")


def _verdicts(done: subprocess.CompletedProcess[str]) -> str:
    """Each check's verdict and the first words of its detail; for exit 2, the error line (the last on stderr)."""
    try:
        report = json.loads(done.stdout)
    except ValueError:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return (lines[-1] if lines else "(no output)")[:160]
    shown = [
        f"{c['name']} {'pass' if c['passed'] else 'FAIL'}" + ("" if c["passed"] else f" ({c['detail'][:60]})")
        for c in report["checks"]
    ]
    skipped = [f"skipped {name}" for name in report.get("skipped", {})]
    return "; ".join(shown + skipped)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow-ms", type=int, default=2000)
    parser.add_argument("--tree", type=Path, help="another checkout whose glmctl runs beside this one's")
    parser.add_argument("--only", nargs="*", help="run only the cases whose name starts with one of these")
    args = parser.parse_args()
    trees = [("after", ROOT)] + ([("before", args.tree)] if args.tree else [])
    missed = []
    for case in cases(args.slow_ms):
        if args.only and not any(case.name.startswith(prefix) for prefix in args.only):
            continue
        for label, tree in trees:
            outcome = run(case, tree)
            print(f"{case.name:42} {label:6} exit {outcome.code}  {outcome.wall_s:6.1f} s  {outcome.verdicts}")
            sys.stdout.flush()
            # GSM8K's waves (at most 4 round trips of 64 for 200 questions) and one round trip per short suite.
            bound = (4 + 3) * case.latency_ms / 1000 + 5
            if label == "after" and case.latency_ms == args.slow_ms and outcome.wall_s > bound:
                missed.append(f"{case.name}: {outcome.wall_s:.1f} s > {bound:.1f} s")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
