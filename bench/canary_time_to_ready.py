"""Canary time-to-ready (issue 16 item 3): the GSM8K check's questions and wall time, side by side.

Three measurements in one run, each against its alternative:
1. Exact error rates and question counts of the decision rule (dynamic programming over the number of
   right answers, through the same `Sprt` boundaries the operator uses), beside a fixed-size evaluation of
   200 questions at the same confidence.
2. Monte Carlo of the whole decision (`SprtState.feed`, as the check runs it) over many runs.
3. The check itself against `glmctl sim` at a fixed per-request latency and a set accuracy: wall time,
   questions used and sent, the client's overhead, beside the fixed evaluation of 200 sent all at once;
   and the false-failure rate over repeated runs, each on a fresh random draw of GSM8K questions.
   Each run is asked as the operator asks one check: on a client of its own (so on connections of its own,
   opened by the run and closed at its end, all counted in the client's CPU), on the operator's event loop
   (uvloop; `--loop uvloop asyncio` times asyncio's own loop beside it, the two taking turns run by run).

Targets (issue 16): a 0 % deployment fails within 20 questions; a 93 % model passes with at most half the
fixed evaluation's questions and within 1.5x its wall time; a 75 % model fails; client overhead under 5 %;
false failures of a 93 % model at most 1 % over at least 100 runs. Exit 1 if one is missed.

    PYTHONPATH=operator .venv/bin/python bench/canary_time_to_ready.py [--runs 100] [--mc 10000] [--gsm8k DIR]
        [--loop uvloop [asyncio]]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from glm_operator.canary.client import EndpointError, OpenAIClient
from glm_operator.canary.gsm8k import asker, decide, few_shot_prompt, last_integer
from glm_operator.canary.gsm8k_data import Item, parse_jsonl
from glm_operator.canary.sprt import Sprt
from glm_operator.cli import eventloop
from glm_operator.sim.behaviour import Model

THRESHOLD, EXPECTED, FIXED_N = 0.82, 0.93, 200
GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"
if not GSM8K.is_dir():
    GSM8K = Path("/work/shared/data/gsm8k")


# ---------------------------------------------------------------- exact figures of the decision rule


@dataclass
class Exact:
    accuracy: float
    p_pass: float
    mean_used: float
    median_used: int
    p90_used: int


def exact(test: Sprt, accuracy: float) -> Exact:
    """P(pass) and the distribution of questions used, summed over every path of right/wrong answers."""
    alive, p_pass, stopped = {0: 1.0}, 0.0, [0.0] * (test.max_questions + 1)
    up, down = test.step(True), test.step(False)
    for n in range(1, test.max_questions + 1):
        grown: dict[int, float] = {}
        for right, prob in alive.items():
            grown[right + 1] = grown.get(right + 1, 0.0) + prob * accuracy
            grown[right] = grown.get(right, 0.0) + prob * (1 - accuracy)
        alive = {}
        for right, prob in grown.items():
            llr = right * up + (n - right) * down
            if llr >= test.upper or llr <= test.lower or n == test.max_questions:
                stopped[n] += prob
                p_pass += prob if (llr >= test.upper or (llr > test.lower and llr >= 0)) else 0.0
            else:
                alive[right] = prob
    cumulative, quantiles = 0.0, {}
    for n, prob in enumerate(stopped):
        cumulative += prob
        for q in (0.5, 0.9):
            if q not in quantiles and cumulative >= q:
                quantiles[q] = n
    mean = sum(n * prob for n, prob in enumerate(stopped))
    return Exact(accuracy, p_pass, mean, quantiles[0.5], quantiles[0.9])


def binomial_at_least(n: int, p: float, k: int) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def fixed_at(n: int, alpha: float) -> tuple[int, float, float]:
    """The fixed test of n questions passing at >= cutoff with false-pass rate <= alpha: (cutoff, alpha, beta)."""
    cutoff = next(k for k in range(n + 2) if binomial_at_least(n, THRESHOLD, k) <= alpha)
    return cutoff, binomial_at_least(n, THRESHOLD, cutoff), 1 - binomial_at_least(n, EXPECTED, cutoff)


def fixed_size_for(alpha: float, beta: float) -> int:
    """The fewest questions a fixed test needs for both error rates at most the sequential test's."""
    return next(n for n in range(1, 2000) if fixed_at(n, alpha)[2] <= beta)


# ---------------------------------------------------------------- Monte Carlo of the decision


def monte_carlo(test: Sprt, accuracy: float, runs: int, seed: int) -> tuple[float, list[int]]:
    rng, passes, used = random.Random(seed), 0, []
    for _ in range(runs):
        state = test.start()
        while state.verdict is None:
            state.feed([rng.random() < accuracy])
        passes += state.verdict
        used.append(state.asked)
    return passes / runs, used


# ---------------------------------------------------------------- against the simulator


@dataclass
class SimRun:
    passed: bool
    used: int
    sent: int
    wall_s: float
    client_cpu_s: float
    server_s: float  # the server's own time on the critical path: rounds of the fixed latency


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sim:
    """`glmctl sim` in its own process, so that the client's CPU time is this process's alone."""

    def __init__(self, gsm8k: Path, latency_ms: int, accuracy: float | None, fault: str = "none") -> None:
        self.port, self.latency_s = _free_port(), latency_ms / 1000
        argv = [sys.executable, "-m", "glm_operator.cli.main", "sim", "--port", str(self.port), "--fault", fault]
        argv += ["--latency-ms", str(latency_ms), "--gsm8k", str(gsm8k / "test.jsonl")]
        if accuracy is not None:
            argv += ["--accuracy", str(accuracy)]
        self.proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self) -> str:
        """The served model's name, once the simulator answers."""
        client = OpenAIClient(self.url)
        try:
            for _ in range(200):
                try:
                    return await client.model_name()
                except EndpointError:
                    await asyncio.sleep(0.05)
        finally:
            await client.close()
        raise SystemExit(f"glmctl sim on {self.url} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


async def sequential_run(sim: Sim, model: str, items: list[Item], shots: list[Item], concurrency: int) -> SimRun:
    state = Sprt(THRESHOLD, EXPECTED, FIXED_N).start()
    wall, cpu = time.perf_counter(), time.process_time()
    client = OpenAIClient(sim.url, model)  # the run's own client, as each check of the operator has
    try:
        sent = await decide(await asker(client, shots, chat=False), items[:FIXED_N], state, concurrency)
    finally:
        await client.close()
    passed = state.finish()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rounds = math.ceil(state.asked / concurrency)  # question i goes out in round i // concurrency
    return SimRun(passed, state.asked, sent, wall, cpu, rounds * sim.latency_s)


async def fixed_run(sim: Sim, model: str, items: list[Item], shots: list[Item]) -> SimRun:
    """The fixed evaluation: all 200 at once, passing at the cutoff of the same false-pass rate."""
    wall, cpu = time.perf_counter(), time.process_time()
    client = OpenAIClient(sim.url, model)
    try:
        ask = await asker(client, shots, chat=False)
        right = sum(await asyncio.gather(*(ask(item) for item in items[:FIXED_N])))
    finally:
        await client.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return SimRun(right >= FIXED_CUTOFF, FIXED_N, FIXED_N, wall, cpu, sim.latency_s)


FIXED_CUTOFF = 0  # set in main from the exact figures


SIMULATED = {"93 %": ("none", 0.93), "75 %": ("none", 0.75), "0 % (garbled)": ("garbled", 1.0)}


def realized(questions: list[Item], fault: str, accuracy: float) -> float:
    """What the simulator's model answers right over the whole test set, scored as the canary scores."""
    model = Model(fault, questions, accuracy)
    right = sum(last_integer(model.completion(few_shot_prompt([], q.question))) == q.label for q in questions)
    return right / len(questions)


def draw(questions: list[Item], seed: int) -> list[Item]:
    return random.Random(seed).sample(questions, len(questions))


def simulate(
    args: argparse.Namespace, latency_ms: int, questions: list[Item], shots: list[Item]
) -> dict[str, dict[str, list[SimRun]]]:
    """The timed runs at one latency, {loop: {case: runs}}; with several loops, they take turns run by run."""
    runs: dict[str, dict[str, list[SimRun]]] = {loop: {} for loop in args.loop}
    cases = [("93 %", 0.93, "none"), ("75 %", 0.75, "none"), ("0 % (garbled)", None, "garbled")]
    for label, accuracy, fault in cases:
        sim = Sim(args.gsm8k, latency_ms, accuracy, fault)
        try:
            model = eventloop.run(sim.ready(), args.loop[0])
            for i in range(args.timed):
                items = draw(questions, 1000 + i)
                for loop, on_loop in runs.items():
                    waves = eventloop.run(sequential_run(sim, model, items, shots, args.concurrency), loop)
                    on_loop.setdefault(f"{label} waves", []).append(waves)
                    on_loop.setdefault(f"{label} fixed 200", []).append(
                        eventloop.run(fixed_run(sim, model, items, shots), loop)
                    )
            if accuracy == EXPECTED and args.one_at_a_time:
                for loop, on_loop in runs.items():
                    one = sequential_run(sim, model, draw(questions, 1000), shots, 1)
                    on_loop["93 % one at a time"] = [eventloop.run(one, loop)]
        finally:
            sim.stop()
    return runs


async def repeated(args: argparse.Namespace, questions: list[Item], shots: list[Item]) -> list[SimRun]:
    sim = Sim(args.gsm8k, args.fast_latency_ms, EXPECTED)
    try:
        model = await sim.ready()
        runs = [
            await sequential_run(sim, model, draw(questions, 5000 + i), shots, args.concurrency)
            for i in range(args.runs)
        ]
    finally:
        sim.stop()
    return runs


# ---------------------------------------------------------------- report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--latency-ms", type=int, nargs="+", default=[500, 2000], help="simulator latencies for the timed runs"
    )
    parser.add_argument("--fast-latency-ms", type=int, default=20, help="simulator latency for the repeated runs")
    parser.add_argument("--timed", type=int, default=5, help="timed runs of each case")
    parser.add_argument("--runs", type=int, default=100, help="repeated runs of a 93 %% model on the simulator")
    parser.add_argument("--mc", type=int, default=10000, help="Monte Carlo runs of the decision per accuracy")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--gsm8k", type=Path, default=GSM8K, help="folder of GSM8K test.jsonl and train.jsonl")
    parser.add_argument("--one-at-a-time", action="store_true", help="also time concurrency 1 (slow)")
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        nargs="+",
        default=["uvloop"],
        help="the client's event loops: the first (default the operator's, uvloop) is held to the targets, others "
        "are timed beside it, taking turns run by run",
    )
    args = parser.parse_args()

    global FIXED_CUTOFF
    test = Sprt(THRESHOLD, EXPECTED, FIXED_N)
    figures = {p: exact(test, p) for p in (0.0, 0.75, 0.82, 0.90, 0.93)}
    alpha, beta = figures[THRESHOLD].p_pass, 1 - figures[EXPECTED].p_pass
    FIXED_CUTOFF, fixed_alpha, fixed_beta = fixed_at(FIXED_N, alpha)
    n_same = fixed_size_for(alpha, beta)
    mc = {p: monte_carlo(test, p, args.mc, seed=int(p * 100)) for p in (0.0, 0.75, 0.82, 0.93)}

    questions = parse_jsonl((args.gsm8k / "test.jsonl").read_text())
    shots = parse_jsonl((args.gsm8k / "train.jsonl").read_text())[:5]
    timed = {ms: simulate(args, ms, questions, shots) for ms in args.latency_ms}
    again = eventloop.run(repeated(args, questions, shots), args.loop[0])

    out = [
        f"SPRT p0 {test.p0} (threshold) vs p1 {test.p1} (expected), alpha {test.alpha}, beta {test.beta}, cap {FIXED_N}"
    ]
    out.append("\nExact (dynamic programming over every path):\n")
    out.append("| accuracy | P(pass) | questions used: mean | median | p90 | fixed evaluation |")
    out.append("|---|---|---|---|---|---|")
    for p, f in figures.items():
        fixed_pass = binomial_at_least(FIXED_N, p, FIXED_CUTOFF)
        out.append(
            f"| {p:.2f} | {f.p_pass:.4f} | {f.mean_used:.1f} ({f.mean_used / FIXED_N:.2f}x of 200) | "
            f"{f.median_used} | {f.p90_used} | P(pass) {fixed_pass:.4f} with 200 |"
        )
    out.append(
        f"\nSame confidence: the fixed evaluation of 200 passing at >= {FIXED_CUTOFF} right has false-pass "
        f"{fixed_alpha:.4f} (sequential {alpha:.4f}) and false-fail {fixed_beta:.5f} (sequential {beta:.5f}); "
        f"the fewest fixed questions with both rates no worse than the sequential test's: {n_same}."
    )
    out.append(f"\nMonte Carlo of the decision, {args.mc} runs each:\n")
    out.append("| accuracy | P(pass) | questions used: mean | max |")
    out.append("|---|---|---|---|")
    for p, (rate, used) in mc.items():
        out.append(f"| {p:.2f} | {rate:.4f} | {statistics.mean(used):.1f} | {max(used)} |")

    shares = {name: realized(questions, *how) for name, how in SIMULATED.items()}
    out.append(
        "\nSimulated models, share of the GSM8K test set answered right: "
        + ", ".join(f"{name} {share:.4f}" for name, share in shares.items())
    )
    targets: dict[str, bool] = {
        "0 % fails within 20 questions (exact and Monte Carlo)": mc[0.0][0] == 0 and max(mc[0.0][1]) <= 20,
        "93 % passes with at most half the fixed questions (exact and Monte Carlo mean)": max(
            figures[EXPECTED].mean_used, statistics.mean(mc[EXPECTED][1])
        )
        <= FIXED_N / 2,
        "75 % fails (exact P(pass) under 1 %)": figures[0.75].p_pass <= 0.01,
    }
    for ms, by_loop in timed.items():
        for loop, sim in by_loop.items():
            out.extend(report(args, ms, loop, sim, targets if loop == args.loop[0] else None))
    false_fail = sum(not r.passed for r in again) / len(again)
    out.append(
        f"\n93 % model, {len(again)} runs against the simulator at {args.fast_latency_ms} ms, each on a fresh "
        f"draw: {sum(not r.passed for r in again)} failed ({false_fail:.1%}); questions used mean "
        f"{statistics.mean(r.used for r in again):.1f}, max {max(r.used for r in again)}."
    )
    targets["false failures of a 93 % model at most 1 % (simulator, Monte Carlo, exact)"] = (
        max(false_fail, 1 - mc[EXPECTED][0], beta) <= 0.01
    )
    out.append("\n| target | met |\n|---|---|")
    out.extend(f"| {name} | {'yes' if ok else 'NO'} |" for name, ok in targets.items())
    print("\n".join(out))
    return 0 if all(targets.values()) else 1


def report(
    args: argparse.Namespace, ms: int, loop: str, sim: dict[str, list[SimRun]], targets: dict[str, bool] | None
) -> list[str]:
    """The timed runs at one latency on one loop; adds this latency's targets, if given."""
    out = [
        f"\nAgainst `glmctl sim` at {ms} ms a request, concurrency {args.concurrency}, {args.timed} runs of each "
        f"case on fresh draws of GSM8K test questions, each on a client of its own, on {loop} "
        "(means; server time = rounds on the critical path x latency):\n",
        "| case | passed | used | sent | wall s | wall / fixed | wall beyond server time | client CPU / server time "
        "| client CPU ms / request sent |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in sim.items():
        wall = statistics.mean(r.wall_s for r in rs)
        fixed_name = name.replace("waves", "fixed 200").replace("one at a time", "fixed 200")
        fixed_wall = statistics.mean(r.wall_s for r in sim[fixed_name]) if fixed_name in sim else wall
        beyond = statistics.mean(r.wall_s / r.server_s - 1 for r in rs)
        cpu = statistics.mean(r.client_cpu_s / r.server_s for r in rs)
        per_request = statistics.mean(r.client_cpu_s / r.sent for r in rs) * 1000
        out.append(
            f"| {name} | {sum(r.passed for r in rs)}/{len(rs)} | {statistics.mean(r.used for r in rs):.1f} | "
            f"{statistics.mean(r.sent for r in rs):.1f} | {wall:.3f} | {wall / fixed_wall:.2f}x | "
            f"{beyond:+.1%} | {cpu:.1%} | {per_request:.3f} |"
        )

    if targets is None:
        return out

    def mean(name: str, attr: str) -> float:
        return statistics.mean(getattr(r, attr) for r in sim[name])

    waves = [name for name in sim if name.endswith("waves")]
    targets[f"{ms} ms: 0 % fails within 20 questions"] = all(
        not r.passed and r.used <= 20 for r in sim["0 % (garbled) waves"]
    )
    targets[f"{ms} ms: 93 % passes with at most half the fixed questions"] = (
        all(r.passed for r in sim["93 % waves"]) and mean("93 % waves", "used") <= FIXED_N / 2
    )
    targets[f"{ms} ms: 93 % within 1.5x of the fixed wall time"] = mean("93 % waves", "wall_s") <= 1.5 * mean(
        "93 % fixed 200", "wall_s"
    )
    targets[f"{ms} ms: 75 % fails"] = all(not r.passed for r in sim["75 % waves"])
    targets[f"{ms} ms: client CPU under 5 % of the server's time"] = all(
        statistics.mean(r.client_cpu_s / r.server_s for r in sim[name]) < 0.05 for name in waves
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
