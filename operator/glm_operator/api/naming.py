"""How field names are spelled on the wire, shared by every module of the custom resources' models."""

from __future__ import annotations


def wire_name(name: str) -> str:
    """The camelCase name a field has on the wire: `max_questions` -> `maxQuestions`, `gsm8k` -> `gsm8k`.

    Words are split only at underscores. pydantic's `to_camel` also upper-cases a letter that follows a
    digit (`gsm8k` -> `gsm8K`), a spelling no person types and the docs never used.
    """
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)
