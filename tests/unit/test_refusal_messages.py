"""What a refusal says: bounded however many problems an object has."""

from __future__ import annotations

from glm_operator.rules.engine import MAX_LISTED, admit
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
