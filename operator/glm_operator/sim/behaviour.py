"""What the simulated model answers, healthy and under each failure signature.

Healthy, it answers GSM8K from the gold answers it was given (or solves the generated problems), does
simple arithmetic, and copies lists faithfully. The failures follow the upstream reports:
- garbled (vllm-58729): fluent-looking fragments of the prompt (" What is2 +"); about 89 % of chat
  answers have null content with text only in the reasoning (1,178 of 1,319 in the report).
- null-content: the same null-content share, with otherwise correct reasoning.
- stale-topk (vllm-63170): copies skip and alter items or loop to the token limit; some answers go
  wrong; prompt log-likelihood is worse.
- mtp-zero (vllm-52833): answers are right; no draft token is ever accepted.
- repeat (vllm-58729 on B300, the Marlin path's " 4\n" that does not stop): every answer is the right one
  said again and again until `max_tokens` (the server cuts it there, `finish_reason: "length"`); copies loop.
Choices are deterministic per prompt, as at temperature 0. `accuracy` below 1 makes a healthy model
realistic: that share of GSM8K questions (picked per question by a stable hash) is answered right, the rest
with a wrong final number; GLM-5.x answers about 93 % right.
"""

from __future__ import annotations

import hashlib
import re

from glm_operator.canary.gsm8k_data import Item, solve_generated

NULL_SHARE = 1178 / 1319
_ARITH = re.compile(r"What is (\d+)\s*([-+*])\s*(\d+)\?")


def _roll(text: str, salt: str = "") -> float:
    """A stable number in [0, 1) for a prompt: the simulator's temperature-0 'randomness'."""
    return int(hashlib.sha256(f"{salt}{text}".encode()).hexdigest()[:8], 16) / 0x100000000


def _garble(text: str) -> str:
    words = re.sub(r"\s+", " ", text).strip().split(" ")[-6:]
    return " " + "".join(w if i % 2 else f"{w} " for i, w in enumerate(words))[:24]


class Model:
    def __init__(self, fault: str, gold: list[Item] | None = None, accuracy: float = 1.0) -> None:
        self.fault = fault
        self.gold = {item.question.strip(): item for item in gold or []}
        # The questions answered wrong are those with the highest rolls: with gold answers given, exactly
        # the share `accuracy` of them is right (a plain roll per question drifts: 94.5 % for 0.93 on GSM8K).
        rolls = sorted(_roll(q, "accuracy") for q in self.gold)
        right = round(accuracy * len(rolls))
        self.cutoff = accuracy if not rolls else rolls[right] if right < len(rolls) else 1.0

    def _solve(self, question: str) -> tuple[str, str] | None:
        """(reasoning, final answer) for a question this model can answer."""
        item = self.gold.get(question.strip())
        if item is not None:
            return item.answer, item.label
        generated = solve_generated(question)
        if generated is not None:
            return f"Working it out step by step.\n#### {generated}", str(generated)
        match = _ARITH.search(question)
        if match:
            a, op, b = int(match[1]), match[2], int(match[3])
            value = a + b if op == "+" else a - b if op == "-" else a * b
            return f"{a} {op} {b} = {value}", str(value)
        return None

    def _wrong(self, question: str) -> bool:
        if self.fault == "stale-topk" and _roll(question, "wrong") < 0.3:
            return True
        return _roll(question.strip(), "accuracy") >= self.cutoff

    def _repeating(self, text: str) -> str:
        """The answer said again and again, longer than any max_tokens the canaries ask for (the server cuts it)."""
        return (text + " ") * 2048

    def completion(self, prompt: str) -> str:
        # The last "Question: ...\nAnswer:" of a few-shot prompt is the one to answer.
        question = prompt.rsplit("Question: ", 1)[-1].rsplit("\nAnswer:", 1)[0] if "Question: " in prompt else prompt
        if self.fault == "garbled":
            return _garble(question)
        solved = self._solve(question)
        if solved is None:
            return " I am not sure."
        reasoning, answer = solved
        if self.fault == "repeat":
            return " " + self._repeating(f"#### {answer}")
        if self._wrong(question):
            return f" {reasoning.rsplit('####', 1)[0]}#### {int(answer) + 7}"
        return " " + reasoning if "####" in reasoning else f" {reasoning}\n#### {answer}"

    def chat(self, prompt: str) -> tuple[str | None, str]:
        """(content, reasoning)."""
        if self.fault in ("garbled", "null-content") and _roll(prompt, "null") < NULL_SHARE:
            solved = self._solve(prompt)
            thought = solved[0] if solved and self.fault == "null-content" else _garble(prompt) * 3
            return None, thought
        if self.fault == "garbled":
            return _garble(prompt), "Let me think."
        if prompt.startswith("Copy the following list"):
            return self._copy(prompt), "The user wants the list copied."
        if self.fault == "repeat":
            solved = self._solve(prompt.split("\n")[0])
            return self._repeating(solved[1] if solved else "Yes."), "A simple question."
        solved = self._solve(prompt.split("\n")[0])
        if solved is None:
            return "Here is a short answer.", "A simple question."
        reasoning, answer = solved
        if self._wrong(prompt):
            answer = str(int(answer) + 7)
        return f"The answer is {answer}.", reasoning

    def _copy(self, prompt: str) -> str:
        items = prompt.split("\n")[1:]
        if self.fault == "repeat":
            return "\n".join(items[:20] + items[14:20] * 400)
        if self.fault != "stale-topk":
            return "\n".join(items)
        roll = _roll(prompt, "copy")
        if roll < 0.34:  # a loop to the token limit
            return "\n".join(items[:20] + items[14:20] * 40)
        damaged = list(items)
        del damaged[17]  # a skipped item
        damaged[31] = damaged[31].replace("-", "", 1)  # a dropped character
        return "\n".join(damaged)

    def prompt_logprobs(self, prompt: str) -> list[float | None]:
        tokens = prompt.split()
        base = -0.82 if self.fault != "stale-topk" else -1.35
        return [None] + [base + (_roll(t, "lp") - 0.5) * 0.2 for t in tokens[1:]]

    def accepted_share(self, spec_tokens: int) -> float:
        # Position 0 accepts 53 %, decaying by 0.8 per position: about 43 % overall for 3 tokens, as the
        # repaired MI355X runs reported (177/395 = 44.8 %, and 40 %).
        return 0.0 if self.fault == "mtp-zero" else 0.53
