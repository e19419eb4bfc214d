"""A GLMDeployment cannot make the operator mount, run or read what its author could not (rules/access.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api import GLMDeploymentSpec
from glm_operator.catalog.access_policy import (
    DEFAULT_VOLUME_TYPES,
    ENV,
    KNOWN_VOLUME_TYPES,
    AccessPolicy,
    AccessPolicyError,
)
from glm_operator.catalog.bundle import Catalogs
from glm_operator.cli.main import main
from glm_operator.k8s import access as k8s_access
from glm_operator.rules.access import (
    LOADER_ENV_NAMES,
    AccessNeed,
    access_needs,
    new_access_needs,
)
from glm_operator.rules.engine import admit
from tests.support.authorizer import fake_authorizer
from tests.support.builders import GLMDeploymentBuilder as B


def _b() -> B:
    return B().accelerator("H200").tensor(8)


def _with_volume(volume: dict[str, Any], mount: bool = True) -> dict[str, Any]:
    builder = _b().set("spec.pod.volumes", [volume])
    if mount:
        builder = builder.set("spec.pod.volumeMounts", [{"name": volume["name"], "mountPath": "/data"}])
    return builder.build()


def _errors(obj: dict[str, Any], catalogs: Catalogs | None = None) -> list[str]:
    result = admit(obj, catalogs or Catalogs.packaged())
    return [f.message for f in result.errors]


PROJECTED_TOKEN = {
    "name": "tok",
    "projected": {"sources": [{"serviceAccountToken": {"path": "token", "audience": "vault"}}]},
}


@pytest.mark.parametrize(
    ("volume", "field", "what"),
    [
        ({"name": "root", "hostPath": {"path": "/"}}, "spec.pod.volumes[0].hostPath", "node's own files"),
        (PROJECTED_TOKEN, "spec.pod.volumes[0].projected.sources[0].serviceAccountToken", "a token of the"),
        ({"name": "img", "image": {"reference": "evil/x"}}, "spec.pod.volumes[0].image", "image policy never sees"),
        ({"name": "n", "nfs": {"server": "10.0.0.1", "path": "/"}}, "spec.pod.volumes[0].nfs", "not allowed it"),
        ({"name": "g", "gitRepo": {"repository": "https://x"}}, "spec.pod.volumes[0].gitRepo", "not allowed it"),
    ],
)
def test_a_volume_type_the_policy_does_not_allow_is_refused_with_its_field_and_the_fix(
    volume: dict[str, Any], field: str, what: str
) -> None:
    errors = _errors(_with_volume(volume))
    (message,) = [m for m in errors if m.startswith(field + ":")]
    assert what in message and "(rule access/volume)" in message
    assert "podPolicy.volumeTypes" in message and message.endswith(".")


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "c", "configMap": {"name": "launcher", "defaultMode": 0o755}},
        {"name": "s", "secret": {"secretName": "certs"}},
        {"name": "e", "emptyDir": {}},
        {"name": "p", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "pr", "projected": {"sources": [{"configMap": {"name": "a"}}, {"secret": {"name": "b"}}]}},
    ],
)
def test_volume_types_allowed_by_default_are_admitted(volume: dict[str, Any]) -> None:
    assert _errors(_with_volume(volume)) == []


def test_an_administrator_can_allow_host_paths_and_projected_tokens_in_the_policy() -> None:
    policy = AccessPolicy.from_values(
        {"podPolicy": {"volumeTypes": [*DEFAULT_VOLUME_TYPES, "hostPath", "projected.serviceAccountToken"]}}
    )
    catalogs = dataclasses.replace(Catalogs.packaged(), access_policy=policy)
    assert _errors(_with_volume({"name": "root", "hostPath": {"path": "/"}}), catalogs) == []
    assert _errors(_with_volume(PROJECTED_TOKEN), catalogs) == []


def test_a_volume_with_two_sources_is_refused() -> None:
    errors = _errors(_with_volume({"name": "two", "emptyDir": {}, "hostPath": {"path": "/"}}))
    assert any(m.startswith("spec.pod.volumes[0]: two: a volume has one source, this one has 2") for m in errors)


def test_a_volume_without_a_source_is_the_emptydir_kubernetes_makes_of_it() -> None:
    assert _errors(_with_volume({"name": "scratch"})) == []
    no_empty_dir = AccessPolicy(volume_types=frozenset({"configMap"}))
    catalogs = dataclasses.replace(Catalogs.packaged(), access_policy=no_empty_dir)
    assert any("emptyDir volumes are not allowed" in m for m in _errors(_with_volume({"name": "scratch"}), catalogs))


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "PATH"])
def test_env_that_changes_the_loader_or_the_program_is_refused(name: str) -> None:
    errors = _errors(_b().env(name, "/data/x").build())
    (message,) = [m for m in errors if "rule access/env" in m]
    assert message.startswith(f"spec.engine.env[0].name: {name}: it changes which code the container loads")
    assert "spec.engine.image" in message


def test_every_loader_name_is_refused_and_ordinary_vllm_env_is_not() -> None:
    for name in sorted(LOADER_ENV_NAMES):
        assert any("rule access/env" in m for m in _errors(_b().env(name, "x").build())), name
    assert _errors(_b().env("VLLM_LOGGING_LEVEL", "DEBUG").build()) == []


def test_one_refusal_lists_every_access_problem_at_once() -> None:
    obj = (
        _b()
        .env("LD_PRELOAD", "/data/evil.so")
        .set("spec.pod.volumes", [{"name": "root", "hostPath": {"path": "/"}}, PROJECTED_TOKEN])
        .set("spec.canary", {"gsm8k": {"source": {"url": "http://169.254.169.254/latest/meta-data/"}}})
        .build()
    )
    result = admit(obj, Catalogs.packaged())
    fields = [f.field for f in result.errors]
    assert fields == [
        "spec.pod.volumes[0].hostPath",
        "spec.pod.volumes[1].projected.sources[0].serviceAccountToken",
        "spec.engine.env[0].name",
        "spec.canary.gsm8k.source.url",
    ]
    assert result.rejection().startswith("4 problem(s) with this GLMDeployment:")


def _spec(obj: dict[str, Any]) -> GLMDeploymentSpec:
    return GLMDeploymentSpec.model_validate(obj["spec"])


def test_every_named_secret_configmap_claim_and_account_is_an_access_need_with_its_field() -> None:
    obj = (
        _b()
        .set("spec.model.tokenSecret", {"name": "hf", "key": "token"})
        .set("spec.pod.imagePullSecrets", [{"name": "pull"}])
        .set("spec.pod.serviceAccountName", "builder")
        .set(
            "spec.pod.volumes",
            [
                {"name": "s", "secret": {"secretName": "other-teams-secret"}},
                {"name": "c", "configMap": {"name": "cm"}},
                {"name": "p", "persistentVolumeClaim": {"claimName": "claim"}},
                {"name": "pr", "projected": {"sources": [{"downwardAPI": {}}, {"secret": {"name": "ps"}}]}},
            ],
        )
        .set("spec.canary", {"gsm8k": {"source": {"configMap": "questions"}}})
        .build()
    )
    needs = access_needs(_spec(obj))
    assert [(n.field, n.verb, n.resource, n.name) for n in needs] == [
        ("spec.model.tokenSecret.name", "get", "secrets", "hf"),
        ("spec.pod.imagePullSecrets[0].name", "get", "secrets", "pull"),
        ("spec.pod.volumes[0].secret.secretName", "get", "secrets", "other-teams-secret"),
        ("spec.pod.volumes[1].configMap.name", "get", "configmaps", "cm"),
        ("spec.pod.volumes[2].persistentVolumeClaim.claimName", "get", "persistentvolumeclaims", "claim"),
        ("spec.pod.volumes[3].projected.sources[1].secret.name", "get", "secrets", "ps"),
        ("spec.pod.serviceAccountName", "impersonate", "serviceaccounts", "builder"),
        ("spec.canary.gsm8k.source.configMap", "get", "configmaps", "questions"),
    ]


@pytest.mark.parametrize("account", [None, "default", "listed"])
def test_the_default_service_account_and_administrator_listed_ones_need_no_check(account: str | None) -> None:
    builder = _b()
    if account is not None:
        builder = builder.set("spec.pod.serviceAccountName", account)
    assert access_needs(_spec(builder.build()), service_accounts=("listed",)) == []


def test_a_secret_volume_without_a_name_is_refused_since_it_cannot_be_checked() -> None:
    errors = _errors(_with_volume({"name": "s", "secret": {}}))
    assert any(m.startswith("spec.pod.volumes[0].secret.secretName: null: must name the object") for m in errors)


def test_an_update_checks_only_references_the_stored_object_did_not_have() -> None:
    old = _b().set("spec.pod.imagePullSecrets", [{"name": "pull"}]).build()
    new = _b().set("spec.pod.imagePullSecrets", [{"name": "pull"}, {"name": "stolen"}]).build()
    assert [n.name for n in new_access_needs(new, old, ())] == ["stolen"]
    assert new_access_needs(old, old, ()) == [], "the operator's own patches of an unchanged spec need no review"
    assert [n.name for n in new_access_needs(new, None, ())] == ["pull", "stolen"], "a create checks all"


def test_a_refused_need_reads_as_field_value_problem_and_fix() -> None:
    need = AccessNeed("spec.pod.volumes[0].secret.secretName", "get", "secrets", "db-password")
    message = need.refusal("team-a", "alice").message
    assert message.startswith(
        "spec.pod.volumes[0].secret.secretName: db-password: alice may not get Secret team-a/db-password"
    )
    assert "(rule access/secret)" in message and "spec.model.tokenSecret" in message
    account = AccessNeed("spec.pod.serviceAccountName", "impersonate", "serviceaccounts", "admin")
    assert "podPolicy.serviceAccounts" in account.refusal("team-a", "alice").message


def test_the_subject_access_review_asks_for_the_requesting_user_with_groups_and_extra() -> None:
    need = AccessNeed("spec.model.tokenSecret.name", "get", "secrets", "hf")
    userinfo = {"username": "alice", "uid": "u1", "groups": ["team-a"], "extra": {"scopes": ["x"]}}
    review = k8s_access.subject_access_review(need, "ns", userinfo)
    assert review["spec"] == {
        "user": "alice",
        "uid": "u1",
        "groups": ["team-a"],
        "extra": {"scopes": ["x"]},
        "resourceAttributes": {"namespace": "ns", "verb": "get", "group": "", "resource": "secrets", "name": "hf"},
    }


def test_a_granted_right_is_remembered_for_its_ttl_and_asked_again_after(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_authorizer(monkeypatch, allowed={"mine"})
    now = [100.0]
    granted = k8s_access.GrantedRights(clock=lambda: now[0])
    needs = [AccessNeed("a", "get", "secrets", "mine")]
    alice = {"username": "alice", "uid": "u1", "groups": ["team-a"]}
    for _ in range(3):
        assert k8s_access.denied(needs, "ns", alice, granted) == []
    assert len(asked) == 1
    now[0] += k8s_access.ALLOWED_TTL_S
    assert k8s_access.denied(needs, "ns", alice, granted) == []
    assert len(asked) == 2


def test_a_refusal_is_never_remembered_so_a_right_just_granted_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed: set[str] = set()
    asked = fake_authorizer(monkeypatch, allowed=allowed)
    granted = k8s_access.GrantedRights()
    needs = [AccessNeed("a", "get", "secrets", "theirs")]
    assert len(k8s_access.denied(needs, "ns", {"username": "alice"}, granted)) == 1
    allowed.add("theirs")  # the administrator grants it
    assert k8s_access.denied(needs, "ns", {"username": "alice"}, granted) == []
    assert len(asked) == 2


@pytest.mark.parametrize(
    "other",
    [
        ({"username": "bob", "uid": "u1", "groups": ["team-a"]}, "ns", "mine"),
        ({"username": "alice", "uid": "u2", "groups": ["team-a"]}, "ns", "mine"),
        ({"username": "alice", "uid": "u1", "groups": ["team-b"]}, "ns", "mine"),
        ({"username": "alice", "uid": "u1", "groups": ["team-a"], "extra": {"scopes": ["x"]}}, "ns", "mine"),
        ({"username": "alice", "uid": "u1", "groups": ["team-a"]}, "other-ns", "mine"),
        ({"username": "alice", "uid": "u1", "groups": ["team-a"]}, "ns", "also-mine"),
    ],
)
def test_a_right_granted_to_one_user_object_and_namespace_is_not_lent_to_another(
    monkeypatch: pytest.MonkeyPatch, other: tuple[dict[str, Any], str, str]
) -> None:
    asked = fake_authorizer(monkeypatch, allowed={"mine", "also-mine"})
    granted = k8s_access.GrantedRights()
    alice = {"username": "alice", "uid": "u1", "groups": ["team-a"]}
    k8s_access.denied([AccessNeed("a", "get", "secrets", "mine")], "ns", alice, granted)
    userinfo, namespace, name = other
    k8s_access.denied([AccessNeed("a", "get", "secrets", name)], namespace, userinfo, granted)
    assert len(asked) == 2


def test_all_granted_says_whether_the_api_server_would_be_asked_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_authorizer(monkeypatch, allowed={"mine", "also-mine"})
    now = [100.0]
    granted = k8s_access.GrantedRights(clock=lambda: now[0])
    alice = {"username": "alice", "uid": "u1", "groups": ["team-a"]}
    mine, also = AccessNeed("a", "get", "secrets", "mine"), AccessNeed("b", "get", "secrets", "also-mine")
    assert not k8s_access.all_granted([mine], "ns", alice, granted)
    k8s_access.denied([mine], "ns", alice, granted)
    assert k8s_access.all_granted([mine], "ns", alice, granted)
    assert not k8s_access.all_granted([mine, also], "ns", alice, granted)  # one of them is still to be asked
    assert not k8s_access.all_granted([mine], "ns", {**alice, "username": "bob"}, granted)
    assert not k8s_access.all_granted([mine], "other", alice, granted)
    now[0] += k8s_access.ALLOWED_TTL_S
    assert not k8s_access.all_granted([mine], "ns", alice, granted)
    assert len(asked) == 1


def test_the_rights_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s_access, "ALLOWED_ENTRIES", 3)
    granted = k8s_access.GrantedRights()
    keys = [granted.key(AccessNeed("a", "get", "secrets", f"s{i}"), "ns", {"username": "alice"}) for i in range(5)]
    for key in keys:
        granted.grant(key)
    assert [granted.granted(k) for k in keys] == [False, False, True, True, True]


def test_only_the_needs_the_api_server_denies_are_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_authorizer(monkeypatch, allowed={"mine"})
    needs = [AccessNeed("a", "get", "secrets", "mine"), AccessNeed("b", "get", "secrets", "theirs")]
    assert [n.name for n in k8s_access.denied(needs, "ns", {"username": "alice"})] == ["theirs"]
    assert [a.spec.user for a in asked] == ["alice", "alice"]


def test_more_objects_than_the_review_budget_are_refused_unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"s{i}" for i in range(k8s_access.MAX_REVIEWS + 3)]
    asked = fake_authorizer(monkeypatch, allowed=set(names))
    needs = [AccessNeed(f"f{i}", "get", "secrets", name) for i, name in enumerate(names)]
    assert [n.name for n in k8s_access.denied(needs, "ns", {"username": "alice"})] == names[-3:]
    assert len(asked) == k8s_access.MAX_REVIEWS


def test_the_same_object_named_twice_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_authorizer(monkeypatch, allowed=set())
    needs = [AccessNeed("a", "get", "secrets", "x"), AccessNeed("b", "get", "secrets", "x")]
    assert len(k8s_access.denied(needs, "ns", {"username": "alice"})) == 2
    assert len(asked) == 1


def test_reviews_past_their_time_budget_refuse_instead_of_stalling_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_authorizer(monkeypatch, allowed={"x", "y"})
    clock = iter([0.0, 0.0, k8s_access.REVIEWS_BUDGET_S + 1])
    monkeypatch.setattr(k8s_access.time, "monotonic", lambda: next(clock))
    needs = [AccessNeed("a", "get", "secrets", "x"), AccessNeed("b", "get", "secrets", "y")]
    with pytest.raises(k8s_access.AccessCheckFailed, match="took longer"):
        k8s_access.denied(needs, "ns", {"username": "alice"})


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"podPolicy": {"volumeTypes": ["hostpath"]}}, "podPolicy.volumeTypes"),
        ({"podPolicy": {"volumeTypes": ["gitRepo"]}}, "podPolicy.volumeTypes"),
        ({"podPolicy": {"serviceAccounts": ["Not A Name"]}}, "podPolicy.serviceAccounts"),
        ({"canaryData": {"allowedUrls": ["file:///etc/"]}}, "canaryData.allowedUrls"),
        ({"canaryData": {"allowedUrls": ["https://user:pw@x.example/"]}}, "canaryData.allowedUrls"),
        ({"canaryData": {"maxBytes": 0}}, "canaryData.maxBytes"),
        ({"canaryData": {"timeoutSeconds": 0}}, "canaryData.timeoutSeconds"),
        ({"podPolicy": {"other": 1}}, "podPolicy"),
    ],
)
def test_a_malformed_policy_is_refused_naming_the_setting(values: dict[str, Any], setting: str) -> None:
    with pytest.raises(AccessPolicyError, match=setting.replace(".", r"\.")):
        AccessPolicy.from_values(values)


def test_the_policy_defaults_allow_no_host_path_no_token_and_no_url() -> None:
    policy = AccessPolicy.from_env({})
    assert "hostPath" not in policy.volume_types and "projected.serviceAccountToken" not in policy.volume_types
    assert policy.canary_urls == () and set(DEFAULT_VOLUME_TYPES) <= KNOWN_VOLUME_TYPES


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://data.example.com/gsm8k/test.jsonl", True),
        ("https://data.example.com/gsm8k", True),
        ("https://data.example.com/gsm8k-evil/test.jsonl", False),
        ("http://data.example.com/gsm8k/test.jsonl", False),
        ("https://data.example.com:8443/gsm8k/test.jsonl", False),
        ("https://data.example.com.evil.io/gsm8k/test.jsonl", False),
        ("https://user@data.example.com/gsm8k/test.jsonl", False),
    ],
)
def test_url_prefixes_match_scheme_host_port_and_a_path_boundary(url: str, allowed: bool) -> None:
    policy = AccessPolicy(canary_urls=("https://data.example.com/gsm8k",))
    assert policy.allows_url(url) is allowed


@pytest.mark.parametrize("path", ["//", "/.", "/etc", "/var/lib/glmops/../../etc", "/var/lib/glmops-evil", "/root"])
def test_a_node_cache_outside_the_allowed_directories_is_refused(path: str) -> None:
    errors = _errors(_b().set("spec.modelCache.nodeCache", {"path": path}).build())
    (message,) = [m for m in errors if "rule access/node-cache" in m]
    assert message.startswith(f"spec.modelCache.nodeCache.path: {path}: the pods mount this node directory")
    assert "/var/lib/glmops" in message


def test_a_node_cache_under_an_allowed_directory_is_admitted() -> None:
    assert _errors(_b().set("spec.modelCache.nodeCache", {"path": "/var/lib/glmops/models"}).build()) == []
    policy = AccessPolicy.from_values({"podPolicy": {"nodeCacheDirectories": ["/mnt/nvme"]}})
    catalogs = dataclasses.replace(Catalogs.packaged(), access_policy=policy)
    assert _errors(_b().set("spec.modelCache.nodeCache", {"path": "/mnt/nvme/models"}).build(), catalogs) == []
    with pytest.raises(AccessPolicyError, match="nodeCacheDirectories"):
        AccessPolicy.from_values({"podPolicy": {"nodeCacheDirectories": ["/"]}})


def _canary_source(source: dict[str, Any]) -> dict[str, Any]:
    return _b().set("spec.canary", {"gsm8k": {"source": source}}).build()


@pytest.mark.parametrize("path", ["/dev/zero", "/var/run/secrets/kubernetes.io/serviceaccount/token", "/etc/passwd"])
def test_a_canary_source_path_is_refused_naming_the_configmap_field(path: str) -> None:
    (message,) = _errors(_canary_source({"path": path}))
    assert message.startswith(f'spec.canary.gsm8k.source.path: "{path}": the operator would read this file')
    assert "spec.canary.gsm8k.source.configMap" in message


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://kubernetes.default.svc/api/v1/secrets",
        "https://huggingface.co/datasets/openai/gsm8k/test.jsonl",
        "file:///etc/passwd",
    ],
)
def test_a_canary_url_not_under_the_allowed_prefixes_is_refused(url: str) -> None:
    (message,) = _errors(_canary_source({"url": url}))
    assert message.startswith("spec.canary.gsm8k.source.url: ") and "source.configMap" in message


def test_a_canary_url_under_an_allowed_prefix_is_admitted() -> None:
    policy = AccessPolicy(canary_urls=("https://data.example.com/gsm8k/",))
    catalogs = dataclasses.replace(Catalogs.packaged(), access_policy=policy)
    assert _errors(_canary_source({"url": "https://data.example.com/gsm8k/test.jsonl"}), catalogs) == []
    assert _errors(_canary_source({"configMap": "questions"})) == []


ACCESS_VALUES = """
podPolicy:
  volumeTypes: [configMap, hostPath]
canaryData:
  allowedUrls: [https://data.example.com/gsm8k/]
imagePolicy: {allowCustomImages: true}
"""


@pytest.mark.parametrize(
    "change",
    [
        {"spec.pod.volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        {"spec.pod.volumes": [{"name": "e", "emptyDir": {}}]},
        {"spec.canary": {"gsm8k": {"source": {"url": "https://data.example.com/gsm8k/test.jsonl"}}}},
        {"spec.canary": {"gsm8k": {"source": {"url": "http://169.254.169.254/"}}}},
    ],
)
@pytest.mark.parametrize("with_values", [True, False])
def test_glmctl_validate_with_the_charts_values_decides_as_the_webhook(
    change: dict[str, Any], with_values: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(ACCESS_VALUES)
    builder = _b()
    for dotted, value in change.items():
        builder = builder.set(dotted, value)
    obj = builder.build()
    manifest = tmp_path / "glm.yaml"
    manifest.write_text(yaml.safe_dump(obj))
    raw = yaml.safe_load(ACCESS_VALUES)
    env = {ENV: json.dumps({k: raw[k] for k in ("podPolicy", "canaryData")})} if with_values else {}
    server = admit(obj, dataclasses.replace(Catalogs.packaged(), access_policy=AccessPolicy.from_env(env)))
    args = ["validate", "-o", "json", *(["--access-policy", str(values)] if with_values else []), str(manifest)]
    code = main(args)
    (result,) = json.loads(capsys.readouterr().out)
    assert result["allowed"] is server.allowed and code == (0 if server.allowed else 1)
    assert [f["message"] for f in result["findings"]] == [f.message for f in server.findings]


def test_glmctl_refuses_a_malformed_access_policy_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("podPolicy: {volumeTypes: [hostpath]}\n")
    manifest = tmp_path / "glm.yaml"
    manifest.write_text(yaml.safe_dump(_b().build()))
    assert main(["validate", "--access-policy", str(values), str(manifest)]) == 2
    assert "podPolicy.volumeTypes" in capsys.readouterr().err
