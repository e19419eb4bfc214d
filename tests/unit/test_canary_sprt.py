"""The GSM8K decision rule: SPRT boundaries, waves that overshoot them, stop conditions, the concurrency bound."""

from __future__ import annotations

import asyncio
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from glm_operator.api.v1alpha1 import GSM8KCanary
from glm_operator.canary.gsm8k import decide
from glm_operator.canary.gsm8k_data import Item
from glm_operator.canary.sprt import ALPHA, BETA, Sprt, hypotheses
from glm_operator.cli.main import build_parser

GLM5 = Sprt(threshold=0.82, expected=0.93, max_questions=200)


def _one_by_one(test: Sprt, outcomes: list[bool]) -> tuple[bool | None, int, int]:
    state = test.start()
    for ok in outcomes:
        state.feed([ok])
    return state.verdict, state.asked, state.correct


@pytest.mark.parametrize(
    "outcomes, verdict, asked",
    [
        ([False] * 7, None, 7),
        ([False] * 8, False, 8),
        ([True] * 23, None, 23),
        ([True] * 24, True, 24),
        ([True] * 20 + [False] + [True] * 11, None, 32),
        ([True] * 20 + [False] + [True] * 12, True, 33),
        ([False, True] * 3 + [False] * 5, False, 11),
    ],
    ids=[
        "seven-wrong-answers-do-not-yet-fail",
        "eight-wrong-answers-fail",
        "twenty-three-right-answers-do-not-yet-pass",
        "twenty-four-right-answers-pass",
        "one-wrong-answer-needs-eight-more-right-ones-to-catch-up-not-yet",
        "one-wrong-answer-needs-eight-more-right-ones-to-catch-up",
        "three-right-answers-do-not-save-a-model-from-its-eighth-wrong-one",
    ],
)
def test_glm5_boundaries_fall_where_the_ratio_crosses_them(
    outcomes: list[bool], verdict: bool | None, asked: int
) -> None:
    assert _one_by_one(GLM5, outcomes)[:2] == (verdict, asked)


def test_boundaries_are_walds_for_the_chosen_error_rates() -> None:
    assert GLM5.upper == pytest.approx(math.log((1 - BETA) / ALPHA))
    assert GLM5.lower == pytest.approx(math.log(BETA / (1 - ALPHA)))
    assert GLM5.step(True) == pytest.approx(math.log(0.93 / 0.82))
    assert GLM5.step(False) == pytest.approx(math.log(0.07 / 0.18))


def test_a_wave_that_overshoots_the_boundary_stops_at_the_answer_that_crossed_it() -> None:
    state = GLM5.start()
    used = state.feed([True] * 24 + [False] * 40)
    assert (state.verdict, used, state.asked, state.correct) == (True, 24, 24, 24)
    assert state.feed([False] * 8) == 0 and state.verdict is True, "a decided test takes no more answers"


@settings(max_examples=200, deadline=None)
@given(
    outcomes=st.lists(st.booleans(), max_size=250),
    cuts=st.lists(st.integers(min_value=1, max_value=64), max_size=40),
    max_questions=st.integers(min_value=1, max_value=200),
)
def test_any_split_into_waves_decides_as_one_question_at_a_time(
    outcomes: list[bool], cuts: list[int], max_questions: int
) -> None:
    test = Sprt(0.82, 0.93, max_questions)
    state, rest = test.start(), list(outcomes)
    for size in [*cuts, len(rest)]:
        wave, rest = rest[:size], rest[size:]
        state.feed(wave)
    assert (state.verdict, state.asked, state.correct) == _one_by_one(test, outcomes)


@pytest.mark.parametrize(
    "outcomes, max_questions, verdict",
    [
        (([True] * 7 + [False]) * 2, 16, False),
        ([True] * 9 + [False], 10, True),
        ([True] * 5, 10, None),
    ],
    ids=["cap-reached-below-the-midpoint-fails", "cap-reached-above-the-midpoint-passes", "short-of-the-cap-waits"],
)
def test_running_out_of_questions_judges_by_the_likelier_hypothesis(
    outcomes: list[bool], max_questions: int, verdict: bool | None
) -> None:
    state = Sprt(0.82, 0.93, max_questions).start()
    state.feed(outcomes)
    assert state.verdict is verdict and not state.early


def test_a_list_shorter_than_the_cap_is_judged_by_the_ratio_sign_when_it_ends() -> None:
    state = GLM5.start()
    state.feed([True] * 10)
    assert state.verdict is None and state.finish() is True and not state.early


@pytest.mark.parametrize(
    "threshold, expected, p0, p1",
    [
        (0.82, 0.93, 0.82, 0.93),
        (0.95, 0.93, 0.95, 0.975),
        (0.0, 0.93, 0.001, 0.93),
        (1.0, 0.93, 0.996, 0.998),
    ],
    ids=["glm5", "threshold-over-expected-moves-expected-up", "zero-threshold", "threshold-one"],
)
def test_hypotheses_stay_ordered_inside_the_unit_interval(
    threshold: float, expected: float, p0: float, p1: float
) -> None:
    assert hypotheses(threshold, expected) == pytest.approx((p0, p1))
    test = Sprt(threshold, expected, 10)
    assert math.isfinite(test.step(True)) and math.isfinite(test.step(False)) and test.step(True) > 0


class _Server:
    """A fake endpoint that answers after a random delay and records how many requests are in flight."""

    def __init__(self, truth: list[bool], seed: int) -> None:
        self.truth, self.rng = truth, random.Random(seed)
        self.in_flight = self.most_in_flight = self.cancelled = 0

    async def ask(self, item: Item) -> bool:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.rng.random() * 0.002)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        return self.truth[int(item.question)]


@settings(max_examples=40, deadline=None)
@given(
    truth=st.lists(st.booleans(), min_size=1, max_size=120),
    concurrency=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_concurrent_asking_honours_the_bound_and_decides_as_one_at_a_time(
    truth: list[bool], concurrency: int, seed: int
) -> None:
    server = _Server(truth, seed)
    items = [Item(str(i), "#### 0") for i in range(len(truth))]
    test = Sprt(0.82, 0.93, 200)
    state = test.start()
    sent = asyncio.run(decide(server.ask, items, state, concurrency))
    state.finish()
    assert server.most_in_flight <= concurrency and server.in_flight == 0
    assert state.asked <= sent <= min(len(truth), math.ceil(state.asked / concurrency) * concurrency)
    expected = test.start()
    expected.feed(truth)
    assert (state.verdict, state.asked, state.correct) == (expected.finish(), expected.asked, expected.correct)


def test_requests_still_in_flight_are_cancelled_once_the_test_decides() -> None:
    server = _Server([False] * 64, seed=1)
    state = GLM5.start()
    items = [Item(str(i), "#### 0") for i in range(64)]
    sent = asyncio.run(decide(server.ask, items, state, concurrency=32))
    assert state.verdict is False and state.asked == 8 and sent == 32, "one wave, nothing more"
    assert server.in_flight == 0 and sent - server.cancelled >= 8


@pytest.mark.parametrize("concurrency, valid", [(0, False), (1, True), (64, True), (256, True), (257, False)])
def test_the_concurrency_setting_is_bounded_in_the_spec_and_the_cli(concurrency: int, valid: bool) -> None:
    if valid:
        assert GSM8KCanary(concurrency=concurrency).concurrency == concurrency
    else:
        with pytest.raises(ValidationError):
            GSM8KCanary(concurrency=concurrency)
    argv = ["canary", "--url", "http://127.0.0.1:1", "--concurrency", str(concurrency)]
    if valid:
        assert build_parser().parse_args(argv).concurrency == concurrency
    else:
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)


def test_the_default_concurrency_is_one_wave_of_64() -> None:
    assert GSM8KCanary().concurrency == 64 and build_parser().parse_args(["canary", "--url", "u"]).concurrency == 64
