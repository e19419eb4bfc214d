"""What a refusal says: bounded however many problems an object has, and no secret-like value it was given."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from glm_operator.rules.engine import MAX_LISTED, admit
from glm_operator.rules.findings import REDACTED, clip, redact, shown_json
from tests.support.builders import GLMDeploymentBuilder


def test_a_refusal_lists_the_first_hundred_problems_and_counts_the_rest() -> None:
    obj = GLMDeploymentBuilder("many-volumes").build()
    obj["spec"]["pod"] = {"volumes": [{}] * 1000}
    result = admit(obj)
    text = result.rejection()
    assert len(result.errors) > MAX_LISTED
    assert text.startswith(f"{len(result.errors)} problem(s) with this GLMDeployment:\n")
    assert text.count("\n- ") == MAX_LISTED + 1
    assert text.endswith(f"- ... and {len(result.errors) - MAX_LISTED} more; fix these and apply again to see the rest")
    assert len(text) < 64 * 1024


# --- secret-like values: never in a refusal, a warning, a status message or an Event -----------------------------

SECRET = "sk-live-4f1d2a9c"


@pytest.mark.parametrize(
    "extra_args",
    [
        [f"--api_key={SECRET}"],
        [f"--api-key={SECRET}"],
        ["--api_key", SECRET],
        ["--api-key", SECRET, "--port", "9000"],
        [f"--hf-token={SECRET}", "--api-key"],
    ],
    ids=["api_key=", "api-key=", "api_key-space", "api-key-then-port", "hf-token"],
)
def test_a_secret_flag_in_extra_args_is_refused_without_its_value(extra_args: list[str]) -> None:
    obj = GLMDeploymentBuilder("secret-args").set("spec.engine.extraArgs", extra_args).build()
    result = admit(obj)
    assert not result.allowed
    text = result.rejection() + "".join(f.message for f in result.findings)
    assert SECRET not in text
    assert "spec.engine.extraArgs[" in text  # the field is still named, and the flag
    assert REDACTED in text or "--api" in text


@pytest.mark.parametrize(
    "env",
    [
        {"name": "HF_TOKEN", "value": 12345},  # a schema error on the value itself
        {"name": "HF_TOKEN", "value": SECRET, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "MY_PASSWORD", "value": SECRET * 40},
    ],
    ids=["wrong-type", "value-and-valueFrom", "long"],
)
def test_an_env_value_is_never_quoted(env: dict[str, Any]) -> None:
    obj = GLMDeploymentBuilder("secret-env").set("spec.engine.env", [env]).build()
    result = admit(obj)
    text = "".join(f.message for f in result.findings) + (result.rejection() if not result.allowed else "")
    assert SECRET not in text and "12345" not in text


@pytest.mark.parametrize(
    "text, hidden",
    [
        (f"--api-key={SECRET}", SECRET),
        (f"--api_key {SECRET}", SECRET),
        (f'["--api_key", "{SECRET}"]', SECRET),
        (f'--api-key="{SECRET} two"', SECRET),
        (f"HF_TOKEN={SECRET}", SECRET),
        (f'{{"name": "AWS_SECRET_ACCESS_KEY", "value": "{SECRET}"}}', SECRET),
        (f"OPENAI_API_KEY={SECRET}", SECRET),
    ],
)
def test_redaction_removes_the_value_and_keeps_the_name(text: str, hidden: str) -> None:
    shown = redact(text)
    assert hidden not in shown and REDACTED in shown


@pytest.mark.parametrize(
    "text", ["--tokenizer zai-org/GLM-5.3", "--max-num-batched-tokens 8192", "--tokenizer-mode auto", "VLLM_X=1"]
)
def test_redaction_leaves_flags_that_only_look_alike(text: str) -> None:
    assert redact(text) == text


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    # A value ends at a space, a quote, or a list's or object's separator (a comma in a key would leak its rest).
    value=st.text(alphabet=st.characters(blacklist_characters=" \t\n\r\"',]}\\", min_codepoint=33), min_size=4),
    name=st.sampled_from(["--api-key", "--api_key", "--hf-token", "--password", "--openai-api-key"]),
    form=st.sampled_from(["{n}={v}", "{n} {v}", '["{n}", "{v}"]', "x {n}={v} --port 1"]),
)
def test_no_secret_value_survives_redaction_or_a_message_cut(value: str, name: str, form: str) -> None:
    text = form.format(n=name, v=value)
    assume(not value.startswith("-"))
    assert value not in redact(text)
    assert value not in clip(text)
    assert value not in shown_json([name, value]) and value not in shown_json(f"{name}={value}")


@pytest.mark.parametrize("spec", [[], {"engine": []}, {"engine": {"env": "x"}}, "spec"], ids=repr)
def test_a_malformed_spec_is_refused_without_an_exception_while_looking_for_secret_env(spec: Any) -> None:
    obj = GLMDeploymentBuilder("malformed").build()
    obj["spec"] = spec
    assert not admit(obj).allowed
