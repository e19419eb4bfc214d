"""The webhook server answers reviews itself: the same decisions, patches and messages kopf's handlers give.

Each sample, and its variants that draw a repair or a warning, goes through both paths: `admission.answer` (what the
operator's server calls) and kopf's handlers (`admission.repair` / `admission.validate` with kopf's merge patch turned
into a JSON patch by kopf itself). Both patches, applied, must give the same object, and both refusals the same text.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import functools
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import jsonpatch
import kopf
import pytest
import yaml

from glm_operator.api.constants import REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID
from glm_operator.control.runtime import Runtime, runtime
from glm_operator.handlers import admission
from glm_operator.render.webhook_certs import generate
from glm_operator.rules.engine import REMEDIATIONS_ANNOTATION, admit
from tests.support.builders import GLMDeploymentBuilder

SAMPLES = sorted((Path(__file__).parents[2] / "samples").glob("*.yaml"))
SERVING = generate(["localhost"], datetime.datetime.now(datetime.UTC))
ALICE = {"username": "alice", "uid": "1", "groups": ["team-a"]}


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in SAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "GLMDeployment":
                doc.setdefault("metadata", {}).setdefault("namespace", "team-a")
                found.append((path.stem, doc))
                bare = copy.deepcopy(doc)  # without engine settings: the repair fills in what it can
                bare["spec"].pop("engine", None)
                found.append((f"{path.stem}-no-engine", bare))
                annotated = copy.deepcopy(bare)  # with annotations already there: the record is added beside them
                annotated["metadata"]["annotations"] = {"team": "a/b", REMEDIATIONS_ANNOTATION: "stale"}
                found.append((f"{path.stem}-annotated", annotated))
                if path.stem == "vllm-63170-h200-pp8-broken":  # a release glmops has not read: warned on
                    newer = copy.deepcopy(doc)
                    newer["spec"]["engine"]["image"] = "vllm/vllm-openai:v0.35.0"
                    found.append((f"{path.stem}-newer", newer))
    # Refused, and warned on besides: expert parallelism vLLM would turn off, on a model too large for one GPU.
    one_gpu = {"model": {"name": "zai-org/GLM-5.3"}, "accelerator": {"type": "H200"}, "parallelism": {"expert": True}}
    found.append(("refused-and-warned", {**GLMDeploymentBuilder().build(), "spec": one_gpu}))
    return found


OBJECTS = _objects()


def _review(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0f1e",
            "operation": "UPDATE" if old else "CREATE",
            "resource": {"group": "glmops.dev", "version": "v1alpha1", "resource": "glmdeployments"},
            "userInfo": ALICE,
            "object": copy.deepcopy(obj),
            "oldObject": copy.deepcopy(old),
        },
    }


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    monkeypatch.setattr(admission, "denied", lambda needs, namespace, user: [])  # rights: see test_admission_access
    return runtime(kopf.Memo())


def _kopf_repair(obj: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    body = kopf.Body(copy.deepcopy(obj))  # type: ignore[arg-type]
    patch, warnings = kopf.Patch(body=body), []  # type: ignore[call-arg]
    asyncio.run(admission.repair(body=body, patch=patch, warnings=warnings, memo=kopf.Memo()))
    return patch.as_json_patch(), warnings


def _kopf_validate(obj: dict[str, Any]) -> tuple[str | None, list[str]]:
    warnings: list[str] = []
    try:
        body = kopf.Body(copy.deepcopy(obj))  # type: ignore[arg-type]
        asyncio.run(admission.validate(body=body, userinfo=ALICE, warnings=warnings, memo=kopf.Memo()))
    except kopf.AdmissionError as refusal:
        assert refusal.code == 422
        return str(refusal), warnings
    return None, warnings


@pytest.mark.parametrize(("name", "obj"), OBJECTS, ids=[n for n, _ in OBJECTS])
def test_the_repair_patches_as_kopf_would(name: str, obj: dict[str, Any], context: Runtime) -> None:
    answer = asyncio.run(admission.answer(_review(obj), REPAIR_WEBHOOK_ID, context))["response"]
    assert answer["uid"] == "0f1e" and answer["allowed"] is True
    ops = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    assert ("patch" in answer) == bool(ops) and answer.get("patchType", "JSONPatch") == "JSONPatch"
    kopf_ops, kopf_warnings = _kopf_repair(obj)
    assert jsonpatch.apply_patch(obj, ops) == jsonpatch.apply_patch(obj, kopf_ops)
    assert answer.get("warnings", []) == kopf_warnings
    result = admit(copy.deepcopy(obj))
    if result.allowed and result.changes:  # the patch brings exactly what the engine decided
        patched = jsonpatch.apply_patch(obj, ops)
        assert patched["spec"] == result.patched["spec"]
        assert patched["metadata"].get("annotations") == result.patched["metadata"].get("annotations")
        assert kopf_warnings, "a repair is said in kubectl's warnings"
    else:
        assert not ops


def test_the_samples_include_repairs_refusals_and_warnings(context: Runtime) -> None:
    """The comparisons above cover every kind of answer (a sample set that drew none would prove little)."""
    results = [admit(copy.deepcopy(obj)) for _, obj in OBJECTS]
    assert any(r.allowed and r.changes for r in results)
    assert any(not r.allowed for r in results)
    assert any(f.severity == "warning" for r in results for f in r.findings)
    assert any(not r.allowed and any(f.severity == "warning" for f in r.findings) for r in results)


@pytest.mark.parametrize(("name", "obj"), OBJECTS, ids=[n for n, _ in OBJECTS])
def test_the_validation_answers_as_kopf_would(name: str, obj: dict[str, Any], context: Runtime) -> None:
    answer = asyncio.run(admission.answer(_review(obj), VALIDATE_WEBHOOK_ID, context))["response"]
    refusal, warnings = _kopf_validate(obj)
    assert answer["allowed"] is (refusal is None)
    if refusal is not None:
        assert answer["status"] == {"message": refusal, "code": 422}
    assert answer.get("warnings", []) == warnings
    engine = [f.message for f in admit(copy.deepcopy(obj)).findings if f.severity == "warning"]
    assert warnings == engine, "kubectl shows every warning, refused or not"
    assert "patch" not in answer


def test_an_update_is_judged_on_the_new_object(context: Runtime) -> None:
    good = next(obj for name, obj in OBJECTS if name == "vllm-63170-h200-pp8-fixed")
    bad = next(obj for name, obj in OBJECTS if name == "vllm-63170-h200-pp8-broken")
    review = _review(bad, old=good)
    assert asyncio.run(admission.answer(review, VALIDATE_WEBHOOK_ID, context))["response"]["allowed"] is False
    review = _review(good, old=bad)
    assert asyncio.run(admission.answer(review, VALIDATE_WEBHOOK_ID, context))["response"]["allowed"] is True


def test_a_failure_inside_is_raised_for_the_server_to_log_count_and_answer(
    context: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not turned into an answer here: the server counts it as an error (test_webhook_limits) for the alert."""

    def broken(*_: Any) -> Any:
        raise KeyError("spec")

    monkeypatch.setattr(admission, "new_access_needs", broken)
    good = next(obj for name, obj in OBJECTS if name == "vllm-63170-h200-pp8-fixed")
    with pytest.raises(KeyError):
        asyncio.run(admission.answer(_review(good), VALIDATE_WEBHOOK_ID, context))


def test_the_operator_s_server_answers_without_kopf() -> None:
    """settings.configure hands the server `answer`, bound to the runtime the handlers read."""
    from glm_operator.handlers import settings
    from glm_operator.k8s.webhooks import GuardedWebhookServer

    memo, kopf_settings = kopf.Memo(), kopf.OperatorSettings()
    env = {"GLMOPS_WEBHOOK_ADDR": "127.0.0.1", "GLMOPS_WEBHOOK_PORT": "0"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        settings.configure(settings=kopf_settings, memo=memo)
    server = kopf_settings.admission.server
    assert isinstance(server, GuardedWebhookServer) and server.answer is not None
    assert server.answer.keywords["context"] is memo.runtime  # type: ignore[attr-defined]


def _post(port: int, path: str, review: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    context = ssl.create_default_context(cadata=SERVING.ca_bundle.decode())
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    connection.request("POST", path, json.dumps(review), {"Content-Type": "application/json"})
    reply = connection.getresponse()
    body = reply.read().decode()
    connection.close()
    return reply.status, json.loads(body) if reply.status == 200 else body


def test_the_server_answers_over_tls_through_answer_and_never_calls_kopf(tmp_path: Path, context: Runtime) -> None:
    from prometheus_client import REGISTRY

    from glm_operator.k8s.webhooks import GuardedWebhookServer
    from tests.support.webhook_server import serve_while

    server = GuardedWebhookServer(
        addr="127.0.0.1", host="localhost", certfile=str(tmp_path / "tls.crt"), pkeyfile=str(tmp_path / "tls.key")
    )
    (tmp_path / "tls.crt").write_bytes(SERVING.tls_cert)
    (tmp_path / "tls.key").write_bytes(SERVING.tls_key)
    server.answer = functools.partial(admission.answer, context=context)
    bare = next(obj for name, obj in OBJECTS if name == "vllm-63170-h200-pp8-fixed-no-engine")
    broken = next(obj for name, obj in OBJECTS if name == "vllm-63170-h200-pp8-broken")
    errors = {"webhook": "glmops-validate", "result": "error"}
    errors_before = REGISTRY.get_sample_value("glmops_webhook_request_duration_seconds_count", errors) or 0.0

    async def kopf_fn(*_: Any, **__: Any) -> dict[str, Any]:
        raise AssertionError("kopf's per-call path was taken")

    async def scenario(port: int) -> None:
        status, repaired = await asyncio.to_thread(_post, port, f"/{REPAIR_WEBHOOK_ID}", _review(bare))
        assert status == 200 and isinstance(repaired, dict)
        ops = json.loads(base64.b64decode(repaired["response"]["patch"]))
        assert jsonpatch.apply_patch(bare, ops)["spec"] == admit(copy.deepcopy(bare)).patched["spec"]
        status, refused = await asyncio.to_thread(_post, port, f"/{VALIDATE_WEBHOOK_ID}", _review(broken))
        assert status == 200 and isinstance(refused, dict)
        assert refused["response"]["allowed"] is False and refused["response"]["status"]["code"] == 422
        assert "vllm-63170" in refused["response"]["status"]["message"]
        nameless = _review(broken)
        del nameless["request"]["object"]["spec"]  # well-formed as a review; the access check then fails on it
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(admission, "new_access_needs", lambda *_: {}["spec"])
            status, text = await asyncio.to_thread(_post, port, f"/{VALIDATE_WEBHOOK_ID}", nameless)
        assert status == 400 and "could not process" in str(text)

    serve_while(server, kopf_fn, scenario)
    assert REGISTRY.get_sample_value("glmops_webhook_request_duration_seconds_count", errors) == errors_before + 1


MANAGED_FIELDS = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:engine": {}}}}]


@pytest.mark.parametrize(("name", "obj"), OBJECTS[:9], ids=[n for n, _ in OBJECTS[:9]])
def test_managed_fields_are_not_judged_and_change_nothing(
    name: str, obj: dict[str, Any], context: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules never see metadata.managedFields (half a review's object, read by no rule); the answers, patch
    included, are those for the object without it."""
    judged: list[dict[str, Any]] = []

    def recorded(o: dict[str, Any], catalogs: Any) -> Any:
        judged.append(o)
        return admit(o, catalogs)

    with_fields = copy.deepcopy(obj)
    with_fields["metadata"]["managedFields"] = MANAGED_FIELDS
    plain = {
        webhook: asyncio.run(admission.answer(_review(obj), webhook, runtime(kopf.Memo())))["response"]
        for webhook in (REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID)
    }
    monkeypatch.setattr(admission, "admit", recorded)
    for webhook in (REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID):
        answer = asyncio.run(admission.answer(_review(with_fields), webhook, context))["response"]
        assert answer == plain[webhook]
    assert judged and all("managedFields" not in o["metadata"] for o in judged)
