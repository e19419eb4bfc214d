"""What a GLMDeployment may make the operator do beyond the image: pod volumes, ServiceAccounts, canary data.

The operator holds more rights than the people who write GLMDeployments, so a field must not let a user mount,
run or fetch through the operator what they could not themselves (docs/security.md). A cluster administrator
sets this once, in the chart's values `podPolicy` and `canaryData` (passed to the operator as the JSON in
GLMOPS_ACCESS_POLICY; `glmctl validate --access-policy values.yaml` reads the same values). The defaults are
safe: no hostPath, no projected ServiceAccount token, no canary URL.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from glm_operator.catalog.policy_values import env_json, values_yaml

ENV = "GLMOPS_ACCESS_POLICY"

DEFAULT_VOLUME_TYPES = (
    "configMap",
    "secret",
    "emptyDir",
    "persistentVolumeClaim",
    "ephemeral",
    "downwardAPI",
    "projected",
    "projected.configMap",
    "projected.secret",
    "projected.downwardAPI",
)
"""Volume sources a GLMDeployment may use unless the administrator says otherwise. Named objects (a Secret, a
ConfigMap, a claim) are also checked against what the author may read (rules/access.py)."""

KNOWN_VOLUME_TYPES = frozenset(
    {
        *DEFAULT_VOLUME_TYPES,
        "projected.serviceAccountToken",
        "projected.clusterTrustBundle",
        "hostPath",
        "csi",
        "nfs",
        "image",
        "iscsi",
        "fc",
        "flexVolume",
        "cephfs",
        "rbd",
        "glusterfs",
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "gcePersistentDisk",
        "cinder",
        "vsphereVolume",
        "portworxVolume",
        "photonPersistentDisk",
        "quobyte",
        "scaleIO",
        "storageos",
        "flocker",
    }
)
"""Every volume source (and projected source) of Kubernetes' Pod API an administrator may allow. gitRepo is not
among them: it runs git on the node, and Kubernetes itself deprecated it for that reason."""

DEFAULT_NODE_CACHE_DIRECTORIES = ("/var/lib/glmops",)
"""Node directories spec.modelCache.nodeCache may use (a hostPath the pods write): glmops' own, by default."""

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""GSM8K's test split is 0.7 MB; 16 MiB leaves room for a larger set without letting a body exhaust memory."""
DEFAULT_TIMEOUT_SECONDS = 30.0
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class AccessPolicyError(ValueError):
    """A policy that cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class AccessPolicy:
    """The administrator's limits on what a GLMDeployment may ask of the operator."""

    volume_types: frozenset[str] = frozenset(DEFAULT_VOLUME_TYPES)
    service_accounts: tuple[str, ...] = ()  # names anyone may run pods as, beside the namespace's default
    node_cache_directories: tuple[str, ...] = DEFAULT_NODE_CACHE_DIRECTORIES
    canary_urls: tuple[str, ...] = ()  # URL prefixes the canary may fetch GSM8K data from (empty: none)
    canary_max_bytes: int = DEFAULT_MAX_BYTES
    canary_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | None) -> AccessPolicy:
        """The policy from the chart's values (their `podPolicy` and `canaryData` mappings)."""
        values = values or {}
        if not isinstance(values, Mapping):
            raise AccessPolicyError(f"{values!r}: expected a mapping with podPolicy and canaryData")
        pod = _mapping(values.get("podPolicy"), "podPolicy", {"volumeTypes", "serviceAccounts", "nodeCacheDirectories"})
        canary = _mapping(values.get("canaryData"), "canaryData", {"allowedUrls", "maxBytes", "timeoutSeconds"})
        types = _strings(pod.get("volumeTypes", list(DEFAULT_VOLUME_TYPES)), "podPolicy.volumeTypes")
        unknown = sorted(set(types) - KNOWN_VOLUME_TYPES)
        if unknown:
            raise AccessPolicyError(
                f"podPolicy.volumeTypes: {unknown}: not a volume source of the Pod API; write e.g. hostPath, csi or "
                "projected.serviceAccountToken"
            )
        accounts = _strings(pod.get("serviceAccounts", []), "podPolicy.serviceAccounts")
        for name in accounts:
            if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
                raise AccessPolicyError(f"podPolicy.serviceAccounts: {name!r}: not a ServiceAccount name")
        directories = _strings(
            pod.get("nodeCacheDirectories", list(DEFAULT_NODE_CACHE_DIRECTORIES)), "podPolicy.nodeCacheDirectories"
        )
        for directory in directories:
            if not directory.startswith("/") or posixpath.normpath(directory) in ("/", "//") or ".." in directory:
                raise AccessPolicyError(
                    f"podPolicy.nodeCacheDirectories: {directory!r}: expected an absolute directory other than /, "
                    "without '..', e.g. /var/lib/glmops"
                )
        urls = _strings(canary.get("allowedUrls", []), "canaryData.allowedUrls")
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
                raise AccessPolicyError(
                    f"canaryData.allowedUrls: {url!r}: expected an http(s) URL prefix without credentials, "
                    "e.g. https://data.example.com/gsm8k/"
                )
        max_bytes = canary.get("maxBytes", DEFAULT_MAX_BYTES)
        timeout = canary.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= 256 * 1024 * 1024:
            raise AccessPolicyError(f"canaryData.maxBytes: {max_bytes!r}: expected an integer from 1 to 268435456")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise AccessPolicyError(f"canaryData.timeoutSeconds: {timeout!r}: expected a number in (0, 600]")
        return cls(
            frozenset(types),
            tuple(accounts),
            tuple(posixpath.normpath(d) for d in directories),
            tuple(urls),
            max_bytes,
            float(timeout),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AccessPolicy:
        """GLMOPS_ACCESS_POLICY (JSON of the chart's podPolicy and canaryData); unset means the defaults."""
        values = env_json(env, ENV, AccessPolicyError)
        if values is None:
            return cls()
        try:
            return cls.from_values(values)
        except AccessPolicyError as err:
            raise AccessPolicyError(f"{ENV}: {err}") from err

    @classmethod
    def from_file_text(cls, text: str, source: str) -> AccessPolicy:
        """A chart values file: its podPolicy and canaryData keys (others are ignored)."""
        raw = values_yaml(text, source, AccessPolicyError)
        if not isinstance(raw, dict):
            raise AccessPolicyError(f"{source}: expected the chart's values, a mapping")
        try:
            return cls.from_values({k: raw[k] for k in ("podPolicy", "canaryData") if k in raw})
        except AccessPolicyError as err:
            raise AccessPolicyError(f"{source}: {err}") from err

    def allows_node_directory(self, path: str) -> bool:
        """Whether `path` (absolute) is at or under one of nodeCacheDirectories, after resolving '.' and '..'."""
        normal = posixpath.normpath(path)
        return any(normal == d or normal.startswith(d.rstrip("/") + "/") for d in self.node_cache_directories)

    def allows_url(self, url: str) -> bool:
        """Whether `url` is under one of the allowed prefixes, compared by scheme, host, port and path boundary."""
        target = urlsplit(url)
        for prefix in self.canary_urls:
            allowed = urlsplit(prefix)
            if (target.scheme, target.hostname, target.port) != (allowed.scheme, allowed.hostname, allowed.port):
                continue
            if target.username or target.password:
                return False
            base = allowed.path or "/"
            if target.path == base or target.path.startswith(base if base.endswith("/") else base + "/"):
                return True
        return False


def _mapping(value: Any, name: str, keys: set[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or set(value) - keys:
        raise AccessPolicyError(f"{name}: {value!r}: expected a mapping with {', '.join(sorted(keys))}")
    return value


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AccessPolicyError(f"{name}: {value!r}: expected a list of strings")
    return list(value)
