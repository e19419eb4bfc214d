"""Degenerate answers fail the canary question they answer; healthy answers of every shape do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm_operator.canary.checks import COPY_ITEMS, copy_fault, null_kind, smoke_fault
from glm_operator.canary.degenerate import degenerate, echoes, repetition
from glm_operator.canary.gsm8k import right
from glm_operator.canary.gsm8k_data import Item, parse_jsonl

GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k"


def chat(content: str | None, finish_reason: str | None = "stop", reasoning: str = "ok") -> dict[str, object]:
    return {"message": {"content": content, "reasoning": reasoning}, "finish_reason": finish_reason}


@pytest.mark.parametrize(
    "content, finish_reason, why",
    [
        ("4", "stop", None),
        ("The answer is **4**.", "stop", None),
        ("2 + 2 = 4", None, None),  # a server that sends no finish_reason: judged on the text
        ("4 " * 200, "length", "did not end by itself (finish_reason 'length')"),
        ("4 " * 30, "stop", "repeats '4' 30 times"),
        ("The answer is 4. " * 8, "stop", "repeats 'The answer is 4.' 8 times"),
        (" What is2 +", "stop", "echoes the question"),
        ("What is 2+2?", "stop", "echoes the question"),
    ],
)
def test_smoke_reads_the_last_number_only_of_an_answer_that_is_not_degenerate(
    content: str, finish_reason: str | None, why: str | None
) -> None:
    fault = smoke_fault(chat(content, finish_reason), "What is 2+2?", "4")
    if why is None:
        assert fault is None
    else:
        assert fault is not None and fault.endswith(f"({why})"), fault


def test_a_short_repeat_or_a_short_answer_inside_the_question_is_not_degenerate() -> None:
    assert repetition("2 + 2 + 2 + 2 = 8, so 8 - 2 = 6") is None  # a few repeats, a short run
    assert not echoes("a", "Name a planet.")  # too short to be an echo
    assert not echoes("Seven days are in a week.", "How many days are in a week?")


def test_null_content_tells_empty_content_from_a_degenerate_answer() -> None:
    assert null_kind(chat(None, "length", "thinking " * 100), "Name a planet.") == "null"
    assert null_kind(chat("Mars", "stop"), "Name a planet.") is None
    assert null_kind(chat("Name a planet", "stop"), "Name a planet.") == "echoes the question"


@pytest.mark.parametrize(
    "content, finish_reason, expected",
    [
        ("\n".join(COPY_ITEMS), "stop", None),
        ("\r\n".join(COPY_ITEMS) + "\r\n", "stop", None),
        ("\n".join(COPY_ITEMS), "length", "every item right; did not end by itself (finish_reason 'length')"),
        (
            "\n".join(COPY_ITEMS[:20] + COPY_ITEMS[14:20] * 40),
            "stop",
            "item 21: expected 'umber-81', got 'onyx-55' (260 lines); "
            "repeats 'onyx-55 pepper-21 quartz-98 raven-34 saf' 41 times",
        ),
    ],
)
def test_a_copy_is_exact_only_when_it_ends_by_itself_without_looping(
    content: str, finish_reason: str, expected: str | None
) -> None:
    assert copy_fault(chat(content, finish_reason)) == expected


def test_gsm8k_counts_a_degenerate_answer_with_the_right_last_number_as_wrong() -> None:
    item = Item("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7")
    assert right(" 3 + 4 = 7\n#### 7", "stop", item)
    assert not right(" #### 7" * 100, "length", item)
    assert not right(" #### 7" * 20, "stop", item)


@pytest.mark.skipif(not GSM8K.is_dir(), reason="the shared GSM8K data is not on this machine")
def test_no_gsm8k_reference_answer_is_degenerate() -> None:
    """The reference answers are what a healthy model writes: the rule must not call one degenerate."""
    items = [item for name in ("test.jsonl", "train.jsonl") for item in parse_jsonl((GSM8K / name).read_text())]
    flagged = [item.question for item in items if degenerate(" " + item.answer, "stop", item.question)]
    assert len(items) > 8000 and flagged == []
