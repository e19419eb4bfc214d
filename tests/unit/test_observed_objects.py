"""The operator's copies of its objects: the newest wins, a deletion is not undone by a late event, nothing leaks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glm_operator.control import observed
from glm_operator.control.observed import ObservedObjects, resource_version, stale_after_relist

OWNED_KINDS = ("Deployment", "Service", "ConfigMap")


def obj(kind: str, name: str, version: str | None, owner: str | None = "glm", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if version is not None:
        meta["resourceVersion"] = version
    if owner is not None:
        meta["labels"] = {"glmops.dev/deployment": owner}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **extra}


def store() -> ObservedObjects:
    return ObservedObjects(OWNED_KINDS)


@pytest.mark.parametrize(
    ("first", "second", "kept"),
    [
        ("5", "7", "7"),  # a newer event replaces
        ("7", "5", "7"),  # a late watch event never replaces the answer of a later write
        ("7", "7", "7"),
        ("abc", "5", "5"),  # a version that is not an integer is not compared: the last recorded wins
        ("7", "abc", "abc"),
        (None, "3", "3"),
    ],
)
def test_the_newest_copy_wins_by_resource_version_and_unordered_ones_by_arrival(
    first: str | None, second: str, kept: str
) -> None:
    s = store()
    s.record(obj("Service", "svc", first, spec={"v": first}))
    s.record(obj("Service", "svc", second, spec={"v": second}))
    got = s.get("ns", "Service", "svc")
    assert got is not None and got["metadata"]["resourceVersion"] == kept and got["spec"] == {"v": kept}


def test_a_copy_drops_managed_fields_and_every_reader_gets_an_object_of_its_own() -> None:
    s = store()
    body = obj("Deployment", "d", "3", spec={"replicas": 2})
    body["metadata"]["managedFields"] = [{"manager": "kcm", "fieldsV1": {"f:spec": {}}}]
    s.record(body)
    first = s.get("ns", "Deployment", "d")
    assert first is not None and "managedFields" not in first["metadata"]
    first["spec"]["replicas"] = 9
    assert s.get("ns", "Deployment", "d") == {
        **body,
        "metadata": {k: v for k, v in body["metadata"].items() if k != "managedFields"},
    }
    assert body["metadata"]["managedFields"], "the recorded body itself is left as it was"


def test_owned_objects_are_found_by_their_deployment_label_and_move_when_it_changes() -> None:
    s = store()
    s.record(obj("Service", "a", "1"))
    s.record(obj("ConfigMap", "b", "2"))
    s.record(obj("Service", "c", "3", owner="other"))
    s.record(obj("Secret", "d", "4"))  # not an owned kind: never counted as the deployment's
    assert [o["metadata"]["name"] for o in s.owned_by("ns", "glm")] == ["b", "a"]  # by kind, then name
    s.record(obj("ConfigMap", "b", "5", owner="other"))
    assert [o["metadata"]["name"] for o in s.owned_by("ns", "glm")] == ["a"]
    assert sorted(o["metadata"]["name"] for o in s.owned_by("ns", "other")) == ["b", "c"]
    s.record(obj("Service", "a", "6", owner=None))  # the label removed: no longer anyone's
    assert s.owned_by("ns", "glm") == ()


@pytest.mark.parametrize(
    ("stored", "deleted_at", "forgotten"),
    [
        ("5", "5", True),  # the deleted object itself
        ("5", "9", True),
        ("12", "9", False),  # re-created (by an apply) after the deletion the event reports
        ("5", None, True),  # a deletion the operator made: no version to compare
        ("abc", "9", True),
    ],
)
def test_a_deletion_forgets_the_copy_unless_it_was_recreated_since(
    stored: str, deleted_at: str | None, forgotten: bool
) -> None:
    s = store()
    s.record(obj("Service", "svc", stored))
    assert s.forget("ns", "Service", "svc", deleted_at) is forgotten
    assert (s.get("ns", "Service", "svc") is None) is forgotten
    assert (s.owned_by("ns", "glm") == ()) is forgotten


def test_forgetting_the_last_owned_copy_leaves_no_empty_entry_behind() -> None:
    s = store()
    for i in range(100):
        s.record(obj("Service", f"svc-{i}", str(i), owner=f"glm-{i}"))
    for i in range(100):
        s.forget_object(obj("Service", f"svc-{i}", str(i), owner=f"glm-{i}"))
    assert len(s) == 0 and s._owned == {} and s.namespaces() == set()


def test_an_object_without_kind_or_name_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="kind and metadata.name"):
        store().record({"metadata": {"name": "x"}})
    assert store().record({"metadata": {"name": "x", "namespace": "ns"}}, kind="Service")


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30))
def test_whatever_order_copies_arrive_in_the_highest_version_is_kept(versions: list[int]) -> None:
    s = store()
    for v in versions:
        s.record(obj("Deployment", "d", str(v), spec={"v": v}))
    got = s.get("ns", "Deployment", "d")
    assert got is not None and got["spec"] == {"v": max(versions)}
    assert resource_version(got) == max(versions)


@pytest.mark.parametrize(
    ("known", "listed", "list_version", "stale"),
    [
        ({"a": 5, "b": 6}, ["a", "b"], 10, []),
        ({"a": 5, "b": 6}, ["a"], 10, ["b"]),  # deleted while no watch saw it
        ({"a": 5, "b": 16}, ["a"], 10, []),  # recorded from a write after the list was served
        ({"a": 5, "b": None}, ["a"], 10, ["b"]),
        ({"a": 5, "b": 16}, ["a"], None, ["b"]),  # no comparable versions: what the list lacks is stale
    ],
)
def test_a_relist_finds_the_copies_deleted_unseen(
    known: dict[str, int | None], listed: list[str], list_version: int | None, stale: list[str]
) -> None:
    items = [{"metadata": {"name": n}} for n in listed]
    assert stale_after_relist(known, items, list_version) == stale


def test_a_writes_answer_that_arrives_after_its_objects_deletion_was_seen_does_not_bring_it_back() -> None:
    s = store()
    s.record(obj("Service", "svc", "50"))
    assert s.forget("ns", "Service", "svc", "60")  # its DELETED event
    assert s.record(obj("Service", "svc", "55")) is False, "a thread's late answer of an apply before the deletion"
    assert s.get("ns", "Service", "svc") is None
    assert s.record(obj("Service", "svc", "61")), "re-created after the deletion: kept"
    assert s.get("ns", "Service", "svc") is not None


def test_deletions_are_remembered_up_to_a_bound() -> None:
    s = store()
    for i in range(observed.TOMBSTONES + 50):
        s.forget("ns", "Service", f"svc-{i}", str(i + 1))
    assert len(s._deleted) == observed.TOMBSTONES
    assert s.record(obj("Service", "svc-0", "1")), "the oldest deletion is forgotten first"
    assert not s.record(obj("Service", f"svc-{observed.TOMBSTONES + 49}", "2"))
