"""The webhooks judge an object once: the validating call reuses the mutating call's evaluation of the same object."""

from __future__ import annotations

import asyncio
import copy
import itertools
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from glm_operator.control.runtime import runtime
from glm_operator.handlers import admission
from glm_operator.k8s.admission_cache import AdmissionCache
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    judged: list[str] = []

    def counted(obj: dict[str, Any], catalogs: Any) -> Any:
        judged.append(obj["metadata"]["name"])
        return admit(obj, catalogs)

    monkeypatch.setattr(admission, "admit", counted)
    return judged


def _both_webhooks(memo: kopf.Memo, mutating: dict[str, Any], validating: dict[str, Any]) -> tuple[Any, list[str]]:
    patch, warnings = kopf.Patch(), []
    asyncio.run(admission.repair(body=kopf.Body(mutating), patch=patch, warnings=[], memo=memo))  # type: ignore[arg-type]
    asyncio.run(admission.validate(body=kopf.Body(validating), userinfo={}, warnings=warnings, memo=memo))  # type: ignore[arg-type]
    return patch, warnings


def _as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server sets between the mutating and the validating call of a create."""
    stored = copy.deepcopy(obj)
    stored["metadata"].update(uid="6c9a", creationTimestamp="2026-12-03T07:00:00Z", generation=1)
    return stored


def test_the_validating_call_of_an_unrepaired_create_reuses_the_mutating_call_s_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged = _counting(monkeypatch)
    obj = B().name("once").accelerator("H200").tensor(8).build()
    _, warnings = _both_webhooks(kopf.Memo(), obj, _as_stored(obj))
    assert judged == ["once"]
    fresh = admit(obj, None)
    assert warnings == [f.message for f in fresh.findings if f.severity == "warning"]


def test_a_refused_object_is_refused_by_the_reused_evaluation_with_every_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged = _counting(monkeypatch)
    obj = B().name("bad").accelerator("H200").tensor(8).build()
    obj["spec"]["engine"]["env"] = [{"name": "LD_PRELOAD", "value": "/x.so"}]
    memo = kopf.Memo()
    with pytest.raises(kopf.AdmissionError) as refused:
        _both_webhooks(memo, obj, _as_stored(obj))
    assert judged == ["bad"]
    assert str(refused.value) == admit(obj, runtime(memo).catalogs.get()).rejection()


def _repaired(name: str) -> dict[str, Any]:
    obj = B().name(name).accelerator("H200").tensor(8).build()
    obj["spec"]["engine"].pop("vllmVersion", None)  # Auto pins the default version: a repair
    return obj


def test_the_validating_call_of_a_repaired_create_reuses_the_repair_s_last_judgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged = _counting(monkeypatch)
    obj, memo = _repaired("repaired"), kopf.Memo()
    first = admit(obj, runtime(memo).catalogs.get())
    assert first.changes, "the object should need a repair for this test"
    _, warnings = _both_webhooks(memo, obj, _as_stored(first.patched))
    assert judged == ["repaired"]
    again = admit(first.patched, runtime(memo).catalogs.get())  # what judging it afresh says
    assert again.allowed and warnings == [f.message for f in again.findings if f.severity == "warning"]


def test_an_object_other_than_the_repair_s_is_judged_again(monkeypatch: pytest.MonkeyPatch) -> None:
    judged = _counting(monkeypatch)
    obj, memo = _repaired("changed-after"), kopf.Memo()
    stored = _as_stored(admit(obj, runtime(memo).catalogs.get()).patched)
    stored["metadata"].setdefault("labels", {})["team"] = "a"  # another mutating webhook added a label
    _both_webhooks(memo, obj, stored)
    assert judged == ["changed-after", "changed-after"]


def test_an_evaluation_is_not_reused_under_other_catalogs_or_after_its_time() -> None:
    now = [0.0]
    cache = AdmissionCache(size=2, ttl_seconds=10, clock=lambda: now[0])
    obj = B().name("a").build()
    result = admit(obj, None)
    catalogs, reread = object(), object()
    key = cache.key(obj)
    cache.put(key, catalogs, result)
    assert cache.get(key, catalogs) is result
    assert cache.get(key, reread) is None
    now[0] = 10.5
    assert cache.get(key, catalogs) is None


def test_the_cache_keeps_only_the_newest_entries() -> None:
    cache = AdmissionCache(size=2)
    catalogs = object()
    objs = [B().name(n).build() for n in ("a", "b", "c")]
    for obj in objs:
        cache.put(cache.key(obj), catalogs, admit(obj, None))
    assert [cache.get(cache.key(o), catalogs) is not None for o in objs] == [False, True, True]


def test_the_key_ignores_only_what_the_api_server_sets() -> None:
    obj = B().name("k").build()
    assert AdmissionCache.key(obj) == AdmissionCache.key(_as_stored(obj))
    managed = copy.deepcopy(obj)
    managed["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    assert AdmissionCache.key(obj) == AdmissionCache.key(managed)  # no rule reads it
    changed = copy.deepcopy(obj)
    changed["metadata"].setdefault("annotations", {})["a"] = "b"
    assert AdmissionCache.key(obj) != AdmissionCache.key(changed)


SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples").glob("*.yaml"))


def test_judging_a_repair_s_result_again_gives_the_answer_the_repair_kept() -> None:
    """What makes keeping a repair's answer for its result safe: the validating webhook reads the verdict, the
    errors and the warnings, and judging the repaired object afresh gives the same ones (every sample, as written
    and with its vLLM version left for Auto to pin)."""
    repaired = []
    for path in SAMPLES:
        for unpinned, doc in itertools.product((False, True), [d for d in yaml.safe_load_all(path.read_text()) if d]):
            if unpinned:
                doc = copy.deepcopy(doc)
                doc["spec"].get("engine", {}).pop("vllmVersion", None)
            result = admit(doc, None)
            if result.allowed and result.changes:
                repaired.append((path.stem, unpinned, result))
    assert len(repaired) >= 5, "the samples should hold repairs for this test to judge"
    for name, unpinned, result in repaired:
        again = admit(result.patched, None)
        assert (again.allowed, _messages(again)) == (result.allowed, _messages(result)), (name, unpinned)


def _messages(result: Any) -> tuple[list[str], list[str]]:
    return [f.message for f in result.errors], [f.message for f in result.findings if f.severity == "warning"]
