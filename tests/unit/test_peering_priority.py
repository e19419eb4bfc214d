"""The operator's kopf peering priority: replicas never tie, the newer start wins, a set value is kept."""

from __future__ import annotations

import pytest

from glm_operator.handlers.settings import peering_priority

START = 1_796_235_888.25


def test_two_replicas_started_in_the_same_second_get_different_priorities() -> None:
    # kopf pauses every operator when two peers share a priority: a fresh install's two pods must not tie.
    names = [f"glmops-79bdc49f6d-{suffix}" for suffix in ("gshdw", "qkbbt", "x2x4q", "abcde")]
    assert len({peering_priority({}, START, name) for name in names}) == len(names)
    assert peering_priority({}, START, names[0]) != peering_priority({}, START + 0.0004, names[1])


@pytest.mark.parametrize("later", [0.002, 1.0, 3600.0])
def test_a_replica_started_later_outranks_an_earlier_one_whatever_their_names(later: float) -> None:
    # A rolling update's new pod takes over at once and the old one pauses.
    for old, new in [("glmops-a-zzzzz", "glmops-b-00000"), ("glmops-b-00000", "glmops-a-zzzzz")]:
        assert peering_priority({}, START + later, new) > peering_priority({}, START, old)


def test_a_priority_set_in_the_environment_is_used_as_given() -> None:
    assert peering_priority({"GLMOPS_PEERING_PRIORITY": "200"}, START, "any") == 200
