"""The reconcile's edge: a stored body is parsed once, and the Validated verdict is admission's, word for word."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import ConditionType, Reason
from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.deployment import Observed, plan
from glm_operator.planner.stored import Unparsed, parse_stored
from glm_operator.rules.engine import REMEDIATIONS_ANNOTATION, admit

CATALOGS = Catalogs.packaged()
SAMPLES = sorted((Path(__file__).parents[2] / "samples").glob("*.yaml"))


def _as_stored(doc: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(doc)
    body.setdefault("metadata", {}).update(namespace="ns", uid="uid-1", generation=3)
    return body


def _bodies() -> list[tuple[str, dict[str, Any]]]:
    """Samples as stored without admission (so the rules may repair or refuse them), and broken variants."""
    found = []
    for path in SAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if not (isinstance(doc, dict) and doc.get("kind") == "GLMDeployment"):
                continue
            found.append((path.stem, _as_stored(doc)))
            bare = _as_stored(doc)
            bare["spec"].pop("engine", None)  # Auto repairs what it may
            found.append((f"{path.stem}-no-engine", bare))
            strict = copy.deepcopy(bare)
            strict["spec"]["validation"] = {"remediation": "Reject"}
            found.append((f"{path.stem}-reject", strict))
            recorded = admit(copy.deepcopy(bare), CATALOGS).patched  # admitted: the repairs recorded
            found.append((f"{path.stem}-admitted", _as_stored(recorded)))
    broken = _as_stored(found[0][1])
    broken["spec"]["parallelism"] = {"tensor": 0}
    found.append(("out-of-bounds", broken))
    unknown = _as_stored(found[0][1])
    unknown["spec"]["replicaz"] = 2
    found.append(("unknown-field", unknown))
    secret = _as_stored(found[0][1])
    secret["spec"].setdefault("engine", {})["env"] = [{"name": "HF_TOKEN", "value": 12345}]
    found.append(("secret-of-the-wrong-type", secret))
    return found


BODIES = _bodies()


def _validated(body: dict[str, Any]) -> dict[str, Any]:
    conditions = plan(parse_stored(body), Observed(), CATALOGS).status_patch()["conditions"]
    return next(c for c in conditions if c["type"] == ConditionType.VALIDATED)


@pytest.mark.parametrize("name, body", BODIES, ids=[n for n, _ in BODIES])
def test_the_validated_condition_says_what_admission_says(name: str, body: dict[str, Any]) -> None:
    result = admit(copy.deepcopy(body), CATALOGS)
    cond = _validated(body)
    if not result.allowed:
        assert (cond["status"], cond["reason"]) == ("False", Reason.RULES_FAILED)
        assert cond["message"] == result.rejection()
        return
    annotations = body["metadata"].get("annotations") or {}
    records = yaml.safe_load(annotations.get(REMEDIATIONS_ANNOTATION, "[]"))
    parts = [f"{len(records)} setting(s) repaired by admission" if records else "no repairs needed"]
    parts += [f"warning: {f.message}" for f in result.findings if f.severity == "warning"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", Reason.RULES_PASSED, "; ".join(parts))


def test_the_bodies_cover_repairs_refusals_and_bodies_the_model_refuses() -> None:
    """A set that drew only one kind of verdict would prove little."""
    results = [admit(copy.deepcopy(body), CATALOGS) for _, body in BODIES]
    assert any(r.allowed and r.changes for r in results) and any(r.allowed and not r.changes for r in results)
    assert any(not r.allowed and all(f.rule != "schema" for f in r.errors) for r in results)
    assert sum(isinstance(parse_stored(body), Unparsed) for _, body in BODIES) == 3


@pytest.mark.parametrize("name", ["out-of-bounds", "unknown-field", "secret-of-the-wrong-type"])
def test_a_body_the_model_refuses_is_blocked_and_renders_nothing(name: str) -> None:
    body = dict(BODIES)[name]
    outcome = plan(parse_stored(body), Observed(), CATALOGS)
    patch = outcome.status_patch()
    assert outcome.apply == () and "parallelism" not in patch and patch["observedGeneration"] == 3
    progressing = next(c for c in patch["conditions"] if c["type"] == ConditionType.PROGRESSING)
    assert progressing["reason"] == Reason.BLOCKED
    assert "12345" not in str(patch)


def test_the_planner_reads_the_parsed_model_and_never_parses_the_body_again(monkeypatch: pytest.MonkeyPatch) -> None:
    body = dict(BODIES)[f"{SAMPLES[0].stem}-admitted"]
    stored = parse_stored(body)
    assert isinstance(stored, GLMDeployment) and stored.metadata.uid == "uid-1"
    parses: list[object] = []
    validate = GLMDeployment.model_validate
    monkeypatch.setattr(GLMDeployment, "model_validate", lambda obj, **kw: parses.append(obj) or validate(obj, **kw))
    outcome = plan(stored, Observed(), CATALOGS)
    assert outcome.apply and parses == []
