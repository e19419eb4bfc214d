"""Degenerate answers: right-looking text that a healthy model does not produce for a canary question.

vllm-58729 on B300 (MXFP4 MoE with expert parallelism on SM100, `/work/shared/reference/vllm-known-issues.md`)
answers that repeat, and "2+2" answered with " What is2 +", a piece of the question. Read only by their last
number, an answer that repeats the right number until `max_tokens` passes arithmetic. A canary question has a short
right answer that ends by itself, so an answer is degenerate when

- it did not end by itself: `finish_reason` is not `stop` (`length`: cut at `max_tokens`); an answer without a
  `finish_reason` (a server that does not send one) is judged on its text alone;
- it repeats: a run of 1 to `MAX_UNIT` words said `MIN_REPEATS` or more times in a row, covering `MIN_RUN_WORDS`
  or more words ("4 4 4 4 ...", "The answer is 4. The answer is 4. ...", a copied list looping);
- it echoes the question: everything it says (letters and digits, case and spacing aside) is a piece of the
  question, at least `MIN_ECHO_CHARS` long. Not applied to the copy suite, whose right answer is a piece of its
  question.

`bench/canary_degenerate.py` holds the rule to every GSM8K reference answer, the text a healthy model writes, and
reports how many it would call degenerate (none) and what that does to the false-failure rate.
"""

from __future__ import annotations

import re

MAX_UNIT = 32
MIN_REPEATS = 4
MIN_RUN_WORDS = 24
MIN_ECHO_CHARS = 6
_WORD = re.compile(r"\S+")
_NOT_ALNUM = re.compile(r"[\W_]+")
MAX_WORDS = 8192  # an answer is at most max_tokens (1024 in the canaries) long; beyond this the text is not read


def repetition(text: str) -> tuple[str, int] | None:
    """The longest run of a unit of words said again and again in a row, as (unit, times), if one is long enough."""
    words = _WORD.findall(text)[:MAX_WORDS]
    best: tuple[int, int, int] | None = None  # covered words, start, unit length
    for unit in range(1, MAX_UNIT + 1):
        run = 0
        for i in range(len(words) - unit):
            run = run + 1 if words[i] == words[i + unit] else 0
            covered = run + unit
            long_enough = run and covered // unit >= MIN_REPEATS and covered >= MIN_RUN_WORDS
            if long_enough and (best is None or covered > best[0]):
                best = (covered, i + 1 - run, unit)
    if best is None:
        return None
    covered, start, unit = best
    return " ".join(words[start : start + unit]), covered // unit


def echoes(answer: str, question: str) -> bool:
    """Whether all the answer says is a piece of the question (letters and digits compared, case aside)."""
    said = _NOT_ALNUM.sub("", answer).lower()
    return len(said) >= MIN_ECHO_CHARS and said in _NOT_ALNUM.sub("", question).lower()


def degenerate(text: str, finish_reason: object, question: str | None = None) -> str | None:
    """Why an answer to a question with a short right answer is degenerate, or None when it is not.

    `question` is None where the right answer is itself a piece of the question (the copy suite)."""
    if finish_reason is not None and finish_reason != "stop":
        return f"did not end by itself (finish_reason {finish_reason!r})"
    repeated = repetition(text)
    if repeated is not None:
        unit, times = repeated
        return f"repeats {unit[:40]!r} {times} times"
    if question is not None and echoes(text, question):
        return "echoes the question"
    return None
