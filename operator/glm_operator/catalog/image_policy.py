"""The cluster's image policy: which images a GLMDeployment may name in `spec.engine.image`.

Set once by the cluster's administrator (the chart's `imagePolicy` value, passed to the operator as the JSON
in GLMOPS_IMAGE_POLICY; `glmctl validate --image-policy` reads the same values). Images glmops picks itself
(the catalog's, or the patched images it builds) are always allowed; the policy only governs images a user
names. Images are compared as Docker references, normalized as `docker pull` reads them (`vllm/x` is
`docker.io/vllm/x`, `ubuntu` is `docker.io/library/ubuntu`); a prefix without a registry is on Docker Hub
(`vllm` is `docker.io/vllm`; official images are `docker.io/library/<name>`). A prefix matches only at a path boundary:
`registry.example.com/team` allows `registry.example.com/team/vllm`, never `registry.example.com/team-evil/vllm`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glm_operator.catalog.policy_values import env_json, values_yaml

ENV = "GLMOPS_IMAGE_POLICY"
DOCKER_HUB = "docker.io"

# The reference grammar of the distribution project (reference/regexp.go), in the parts a policy needs.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_PATH = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_HOST_RE = re.compile(rf"^{_HOST}$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-fA-F0-9]{32,}$")


class PolicyError(ValueError):
    """An image policy that cannot be used; the message names the setting and the fix."""


def _split_host(name: str) -> tuple[str | None, str]:
    """(registry host or None, path): the first component is a host when it has a dot or a port, or is localhost."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first.lower(), rest
    return None, name


def repository(ref: str, *, official: bool = True) -> str | None:
    """The fully qualified repository of an image reference (no tag, no digest), or None when it is malformed.

    `official`: a one-part Docker Hub name is an official image (`ubuntu` is `docker.io/library/ubuntu`); off
    for a policy's prefixes, where `vllm` means the namespace docker.io/vllm."""
    name, at, digest = ref.partition("@")
    if at and not _DIGEST.match(digest):
        return None
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            return None
    host, path = _split_host(name)
    if host is not None and not _HOST_RE.match(host):
        return None
    if not _PATH.match(path):
        return None
    host = host or DOCKER_HUB
    if official and host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images
    return f"{host}/{path}"


def repository_prefix(entry: str) -> str:
    """An allowedRepositories entry as a normalized repository prefix; PolicyError when it is not one."""
    text = entry.strip().rstrip("/")
    whole_registry = (
        "/" not in text and bool(_HOST_RE.match(text)) and ("." in text or ":" in text or text == "localhost")
    )
    if whole_registry:
        return text.lower()
    if "@" in text or ":" in text.rsplit("/", 1)[-1]:
        raise PolicyError(
            f"imagePolicy.allowedRepositories: {entry!r}: a repository prefix has no tag or digest; "
            "write e.g. registry.example.com/team"
        )
    normalized = repository(text, official=False) if text else None
    if normalized is None:
        raise PolicyError(
            f"imagePolicy.allowedRepositories: {entry!r}: not a registry or repository prefix; "
            "write e.g. registry.example.com/team or docker.io/vllm"
        )
    return normalized


@dataclass(frozen=True)
class ImagePolicy:
    """Whether users may name images of their own, and from which repositories (empty: any)."""

    allow_custom_images: bool = True
    allowed_repositories: tuple[str, ...] = ()  # normalized prefixes (see repository_prefix)

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | None) -> ImagePolicy:
        """The policy from the chart's `imagePolicy` mapping (allowCustomImages, allowedRepositories)."""
        values = values or {}
        if not isinstance(values, Mapping) or set(values) - {"allowCustomImages", "allowedRepositories"}:
            raise PolicyError(
                f"imagePolicy: {values!r}: expected a mapping with allowCustomImages and allowedRepositories"
            )
        allow = values.get("allowCustomImages", True)
        repos = values.get("allowedRepositories") or []
        if not isinstance(allow, bool):
            raise PolicyError(f"imagePolicy.allowCustomImages: {allow!r}: expected true or false")
        if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
            raise PolicyError(f"imagePolicy.allowedRepositories: {repos!r}: expected a list of repository prefixes")
        return cls(allow, tuple(repository_prefix(r) for r in repos))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ImagePolicy:
        """GLMOPS_IMAGE_POLICY (JSON of the chart's imagePolicy); unset means the open default."""
        values = env_json(env, ENV, PolicyError)
        return cls() if values is None else cls.from_values(values)

    @classmethod
    def from_file_text(cls, text: str, source: str) -> ImagePolicy:
        """A chart values file (its `imagePolicy` key) or the imagePolicy mapping itself."""
        raw = values_yaml(text, source, PolicyError)
        if isinstance(raw, dict) and not set(raw) <= {"allowCustomImages", "allowedRepositories"}:
            raw = raw.get("imagePolicy") or {}
        try:
            return cls.from_values(raw)
        except PolicyError as err:
            raise PolicyError(f"{source}: {err}") from err

    @property
    def restricted(self) -> bool:
        return not self.allow_custom_images or bool(self.allowed_repositories)

    def allows_custom(self, ref: str) -> bool:
        """Whether a user-named image outside the catalog may run."""
        if not self.allow_custom_images:
            return False
        if not self.allowed_repositories:
            return True
        repo = repository(ref)
        if repo is None:
            return False  # a reference that cannot be read cannot be matched
        return any(_within(repo, prefix) for prefix in self.allowed_repositories)

    def describe(self) -> str:
        if not self.allow_custom_images:
            return "imagePolicy.allowCustomImages is false"
        return f"imagePolicy.allowedRepositories is [{', '.join(self.allowed_repositories)}]"


def _within(repo: str, prefix: str) -> bool:
    """Whether `repo` is `prefix` or below it; `/` is the only boundary (team never covers team-evil)."""
    return repo == prefix or repo.startswith(prefix + "/")
