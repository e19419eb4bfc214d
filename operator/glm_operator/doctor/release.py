"""The installed glmops release, read from Helm's release record: what the chart rendered, and so what it grants.

Helm keeps each revision in a Secret of the release namespace (`sh.helm.release.v1.<release>.v<revision>`, labels
`owner=helm`, `name=<release>`, `status`): its `release` key holds the release as base64 of gzipped JSON, whose
`manifest` is every object the chart rendered. The permissions doctor checks are the rules of the Roles and
ClusterRoles in that manifest bound to the operator's ServiceAccount: the chart's templates
(`templates/rbac.yaml`, `_rbac.tpl`, `webhook-rbac.yaml`) stay the one list, in whatever mode it was installed.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from glm_operator.doctor.facts import Permission, ReleaseFact

GZIP_MAGIC = b"\x1f\x8b"
MAX_RELEASE_BYTES = 32 * 1024 * 1024  # a decoded release record above this is not one the chart wrote
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
SECRET_ENV = "GLMOPS_WEBHOOK_SECRET"


class ReleaseRecordError(ValueError):
    """The release record cannot be read as Helm writes it."""


def decode_release(secret_value: str) -> dict[str, Any]:
    """The release of one record: the Secret's `release` value as the API returns it (base64 of Helm's text)."""
    try:
        data = base64.b64decode(base64.b64decode(secret_value, validate=True), validate=True)
    except (binascii.Error, ValueError) as err:
        raise ReleaseRecordError(f"not base64: {err}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(MAX_RELEASE_BYTES + 1)
        except (OSError, EOFError) as err:
            raise ReleaseRecordError(f"not gzip: {err}") from None
        if len(data) > MAX_RELEASE_BYTES:
            raise ReleaseRecordError(f"larger than {MAX_RELEASE_BYTES} bytes once decompressed")
    try:
        release = json.loads(data)
    except ValueError as err:
        raise ReleaseRecordError(f"not JSON: {err}") from None
    if not isinstance(release, dict):
        raise ReleaseRecordError("not a JSON object")
    return release


def manifest_objects(release: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects the chart rendered (hooks and tests are kept apart by Helm, and are not in `manifest`)."""
    try:
        docs = list(yaml.safe_load_all(str(release.get("manifest") or "")))
    except yaml.YAMLError as err:
        raise ReleaseRecordError(f"manifest is not YAML: {err}") from None
    return [d for d in docs if isinstance(d, dict) and d.get("kind")]


def _operator_pod(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    for obj in objects:
        if obj.get("kind") == "Deployment":
            spec: Mapping[str, Any] = obj.get("spec", {}).get("template", {}).get("spec", {})
            return spec
    return {}


def _env(pod: Mapping[str, Any], name: str) -> str | None:
    for container in pod.get("containers") or []:
        for var in container.get("env") or []:
            if var.get("name") == name and isinstance(var.get("value"), str):
                return str(var["value"])
    return None


def release_fact(release: Mapping[str, Any], objects: list[dict[str, Any]]) -> ReleaseFact:
    """What doctor needs of a release: its ServiceAccount, its webhook configurations and certificate, its kinds."""
    pod = _operator_pod(objects)
    kinds = frozenset(str(o["kind"]) for o in objects)
    webhook_configs = tuple((str(o["kind"]), str(o["metadata"]["name"])) for o in objects if o["kind"] in WEBHOOK_KINDS)
    # The chart sets it as <namespace>/<name> (k8s/webhook_certs.py reads it so); the Secret is the release's.
    secret = (_env(pod, SECRET_ENV) or "").rpartition("/")[2] if webhook_configs else None
    chart = (release.get("chart") or {}).get("metadata") or {}
    return ReleaseFact(
        name=str(release.get("name", "")),
        namespace=str(release.get("namespace", "")),
        revision=int(release.get("version") or 0),
        chart_version=str(chart.get("version", "")),
        service_account=str(pod.get("serviceAccountName") or "default"),
        kinds=kinds,
        webhook_configs=webhook_configs,
        certificate_secret=secret or None,
        cert_manager="Certificate" in kinds,
    )


def _bound_to(binding: Mapping[str, Any], account: str, namespace: str) -> bool:
    return any(
        s.get("kind") == "ServiceAccount" and s.get("name") == account and s.get("namespace", namespace) == namespace
        for s in binding.get("subjects") or []
    )


def _rule_permissions(rule: Mapping[str, Any], namespace: str) -> list[Permission]:
    out = []
    for group in rule.get("apiGroups") or [""]:
        for full in rule.get("resources") or []:
            resource, _, sub = str(full).partition("/")
            for verb in rule.get("verbs") or []:
                for name in rule.get("resourceNames") or [""]:
                    out.append(Permission(str(verb), str(group), resource, sub, namespace, str(name)))
    return out


def granted_permissions(objects: list[dict[str, Any]], account: str, namespace: str) -> list[Permission]:
    """Every permission the release's Roles and ClusterRoles grant `account`, where its bindings grant them.

    A ClusterRole bound by a ClusterRoleBinding is asked about cluster-wide; a Role, or a ClusterRole bound by a
    RoleBinding, in the binding's namespace. Order follows the manifest; duplicates are dropped.
    """
    roles = {
        (str(o["kind"]), str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"])): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    seen: dict[Permission, None] = {}
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not _bound_to(binding, account, namespace):
            continue
        where = str(binding["metadata"].get("namespace", "")) if binding["kind"] == "RoleBinding" else ""
        ref = binding.get("roleRef") or {}
        role_namespace = where if ref.get("kind") == "Role" else ""
        role = roles.get((str(ref.get("kind")), role_namespace, str(ref.get("name"))))
        for rule in (role or {}).get("rules") or []:
            seen.update(dict.fromkeys(_rule_permissions(rule, where)))
    return list(seen)
