"""What a GLMDeployment may make the operator do on its author's behalf: no more than the author could.

The operator creates pods with rights its users may lack, so every field that reaches the pod's power is
checked here (docs/security.md):
- volume sources by type, against the administrator's podPolicy.volumeTypes (no hostPath, no projected
  ServiceAccount token by default);
- environment variables that change the dynamic loader, the interpreter or which program runs (LD_*, PYTHON*,
  PATH, ...): refused outright, whatever the image;
- the canary's data source: no operator file by path, URLs only under canaryData.allowedUrls.

Objects a field names in the namespace (a Secret, a ConfigMap, a claim, a ServiceAccount) are the author's to
name only if the author may read (or, for a ServiceAccount, act as) them: `access_needs` lists those, and the
admission webhook asks the API server with a SubjectAccessReview for the requesting user (k8s/access.py).
Pure code: `glmctl validate` runs the same checks, and lists what admission will ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from glm_operator.api import GLMDeploymentSpec
from glm_operator.api.pod import Volume
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding, shown_json

DEFAULT_SERVICE_ACCOUNT = "default"

LOADER_ENV_PREFIXES = ("LD_", "PYTHON", "DYLD_", "MALLOC_")
"""Variables the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT), glibc's allocator or Python (PYTHONPATH,
PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE) reads to load code of the caller's choosing."""
LOADER_ENV_NAMES = frozenset(
    {
        "PATH",  # which `vllm` (or python) binary the container's command runs
        "GLIBC_TUNABLES",  # glibc's own tunables (CVE-2023-4911 came in through it)
        "GCONV_PATH",  # glibc loads character-set modules from it
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "BASH_ENV",  # a file any non-interactive bash sources first
        "ENV",  # the same for sh
        "SHELLOPTS",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
    }
)
"""Further variables that decide which code runs rather than how vLLM serves."""

SECRET_REFERENCE_FIELDS = (
    "spec.model.tokenSecret",
    "spec.pod.imagePullSecrets[]",
    "spec.pod.volumes[]",
)
"""Every field of the API that can name a Secret; each one's Secrets are checked against the author's rights
(tests/unit/test_access.py walks the API models and fails when another appears)."""


@dataclass(frozen=True)
class AccessNeed:
    """An object of the namespace a field names, and the right its author must hold for it (a SubjectAccessReview)."""

    field: str
    verb: str
    resource: str  # plural, core API group: secrets, configmaps, persistentvolumeclaims, serviceaccounts
    name: str

    def refusal(self, namespace: str, user: str) -> Finding:
        """The finding when the author lacks the right."""
        kind = {"secrets": "Secret", "configmaps": "ConfigMap", "persistentvolumeclaims": "PersistentVolumeClaim"}
        if self.resource == "serviceaccounts":
            problem = (
                f"{user} may not act as ServiceAccount {namespace}/{self.name} (no impersonate right on it), and "
                "glmops would run the pods with its token"
            )
            fix = (
                "Leave spec.pod.serviceAccountName unset (the namespace's default), ask for the impersonate right "
                "on that ServiceAccount (the edit role has it), or ask the cluster's administrator to list it in "
                "podPolicy.serviceAccounts"
            )
            return _f("service-account", self.field, self.name, problem, fix)
        what = kind.get(self.resource, self.resource)
        problem = (
            f"{user} may not {self.verb} {what} {namespace}/{self.name}, and the pods would read it with the "
            "operator's rights"
        )
        fix = f"Name a {what} you may read, or ask for get on {namespace}/{self.name} (the edit role has it)"
        if self.resource == "secrets" and self.field != "spec.model.tokenSecret":
            fix += "; the model token goes in spec.model.tokenSecret"
        return _f(self.resource.removesuffix("s"), self.field, self.name, problem, fix)


def _f(rule: str, field: str, value: object, problem: str, fix: str) -> Finding:
    return Finding(rule=f"access/{rule}", severity="error", field=field, value=str(value), problem=problem, fix=fix)


def volume_types(volume: Volume) -> list[tuple[str, str, dict[str, Any]]]:
    """The sources of one volume as (type, path in the volume, body); a projected volume also yields each of its
    sources as `projected.<source>` (path `projected.sources[i].<source>`). None at all is an emptyDir, as Kubernetes
    defaults it."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for key, body in (volume.model_extra or {}).items():
        out.append((key, key, body if isinstance(body, dict) else {}))
        if key == "projected" and isinstance(body, dict):
            sources = body.get("sources")
            for j, source in enumerate(sources if isinstance(sources, list) else []):
                for sub, sub_body in source.items() if isinstance(source, dict) else []:
                    item = sub_body if isinstance(sub_body, dict) else {}
                    out.append((f"projected.{sub}", f"projected.sources[{j}].{sub}", item))
    return out or [("emptyDir", "emptyDir", {})]


def volumes_within_policy(ctx: Context) -> list[Finding]:
    """Each spec.pod.volumes source is a type the cluster's podPolicy.volumeTypes allows (no hostPath by default)."""
    allowed = ctx.catalogs.access_policy.volume_types
    out = []
    for i, volume in enumerate(ctx.spec.pod.volumes):
        sources = list(volume.model_extra or {})
        if len(sources) > 1:
            problem = f"a volume has one source, this one has {len(sources)} ({', '.join(sources)})"
            out.append(_f("volume", f"spec.pod.volumes[{i}]", volume.name, problem, "Give it one source"))
            continue
        for kind, path, body in volume_types(volume):
            if kind in allowed:
                continue
            where = f"spec.pod.volumes[{i}].{path}"
            out.append(
                _f(
                    "volume",
                    where,
                    shown_json(body),
                    f"{kind} volumes are not allowed here ({_why(kind)}); the cluster's podPolicy.volumeTypes "
                    f"allows {', '.join(sorted(allowed))}",
                    "Use one of those (a configMap, an emptyDir or a persistentVolumeClaim), or ask the cluster's "
                    f"administrator to add {kind} to podPolicy.volumeTypes",
                )
            )
    return out


def _why(kind: str) -> str:
    if kind == "hostPath":
        return "it mounts the node's own files into a pod whose image the author picks"
    if kind == "projected.serviceAccountToken":
        return "it hands the pods a token of the ServiceAccount, for an audience the author picks"
    if kind == "image":
        return "it pulls an image the image policy never sees"
    return "the cluster's administrator has not allowed it"


def node_cache_within_policy(ctx: Context) -> list[Finding]:
    """spec.modelCache.nodeCache.path is under one of the cluster's podPolicy.nodeCacheDirectories (a hostPath)."""
    cache = ctx.spec.model_cache.node_cache
    policy = ctx.catalogs.access_policy
    if cache is None or policy.allows_node_directory(cache.path):
        return []
    allowed = ", ".join(policy.node_cache_directories) or "none"
    first = policy.node_cache_directories[0] if policy.node_cache_directories else "/var/lib/glmops"
    example = f"{first}/models"
    return [
        _f(
            "node-cache",
            "spec.modelCache.nodeCache.path",
            cache.path,
            "the pods mount this node directory read-write (a hostPath), and the cluster's "
            f"podPolicy.nodeCacheDirectories allows only {allowed}",
            f"Use a directory under {allowed} (e.g. {example}), "
            "or ask the cluster's administrator to add one to podPolicy.nodeCacheDirectories",
        )
    ]


def env_is_not_the_loaders(ctx: Context) -> list[Finding]:
    """spec.engine.env sets no variable that changes the dynamic loader, the interpreter or which program runs."""
    out = []
    for i, var in enumerate(ctx.spec.engine.env):
        if not (var.name in LOADER_ENV_NAMES or var.name.startswith(LOADER_ENV_PREFIXES)):
            continue
        if not ctx.env_is_users(var.name):
            continue  # glmops' own earlier repair
        out.append(
            _f(
                "env",
                f"spec.engine.env[{i}].name",
                var.name,
                "it changes which code the container loads or runs (the dynamic loader, Python's import path or the "
                "program found on PATH), so the image and the command glmops checked would no longer be what runs",
                "Remove it; run another build through spec.engine.image (the cluster's image policy decides which)",
            )
        )
    return out


def canary_source_is_bounded(ctx: Context) -> list[Finding]:
    """The GSM8K source reads no operator file and fetches only URLs the cluster's canaryData.allowedUrls allows."""
    source = ctx.spec.canary.gsm8k.source
    base = "spec.canary.gsm8k.source"
    out = []
    if source.path is not None:
        out.append(
            _f(
                "canary-data",
                f"{base}.path",
                shown_json(source.path),
                "the operator would read this file of its own filesystem on the author's behalf",
                f"Remove it; put the JSONL in a ConfigMap of this namespace (key test.jsonl) and name it in "
                f"{base}.configMap",
            )
        )
    if source.url is not None:
        policy = ctx.catalogs.access_policy
        scheme = urlsplit(source.url).scheme
        if scheme not in ("http", "https"):
            problem = f"only http and https are fetched, not {scheme or 'a URL without a scheme'}"
        elif not policy.allows_url(source.url):
            allowed = ", ".join(policy.canary_urls) or "none"
            problem = f"the operator fetches only URLs under canaryData.allowedUrls ({allowed})"
        else:
            return out
        out.append(
            _f(
                "canary-data",
                f"{base}.url",
                shown_json(source.url),
                problem,
                f"Put the JSONL in a ConfigMap of this namespace (key test.jsonl) and name it in {base}.configMap, "
                "or ask the cluster's administrator to add the URL's prefix to canaryData.allowedUrls",
            )
        )
    return out


def volumes_name_their_objects(ctx: Context) -> list[Finding]:
    """Secret, ConfigMap and claim volume sources name their object, so the author's right to it can be checked."""
    return reference_problems(ctx.spec)


ACCESS_CHECKS = (
    volumes_within_policy,
    volumes_name_their_objects,
    node_cache_within_policy,
    env_is_not_the_loaders,
    canary_source_is_bounded,
)


def access_needs(spec: GLMDeploymentSpec, service_accounts: tuple[str, ...] = ()) -> list[AccessNeed]:
    """Every namespaced object the spec names, with the right its author needs on it, in field order."""
    needs: list[AccessNeed] = []
    token = spec.model.token_secret
    if token is not None:
        needs.append(AccessNeed("spec.model.tokenSecret.name", "get", "secrets", token.name))
    claim = spec.model_cache.persistent_volume_claim
    if claim:
        needs.append(AccessNeed("spec.modelCache.persistentVolumeClaim", "get", "persistentvolumeclaims", claim))
    pod = spec.pod
    for i, ref in enumerate(pod.image_pull_secrets):
        needs.append(AccessNeed(f"spec.pod.imagePullSecrets[{i}].name", "get", "secrets", ref.name))
    for i, volume in enumerate(pod.volumes):
        needs += _volume_needs(f"spec.pod.volumes[{i}]", volume)
    account = pod.service_account_name
    if account is not None and account != DEFAULT_SERVICE_ACCOUNT and account not in service_accounts:
        needs.append(AccessNeed("spec.pod.serviceAccountName", "impersonate", "serviceaccounts", account))
    config_map = spec.canary.gsm8k.source.config_map
    if config_map is not None:
        needs.append(AccessNeed("spec.canary.gsm8k.source.configMap", "get", "configmaps", config_map))
    return needs


_NAMED = {
    "secret": ("secretName", "secrets"),
    "configMap": ("name", "configmaps"),
    "persistentVolumeClaim": ("claimName", "persistentvolumeclaims"),
    "projected.secret": ("name", "secrets"),
    "projected.configMap": ("name", "configmaps"),
}


def _volume_needs(where: str, volume: Volume) -> list[AccessNeed]:
    out = []
    for kind, path, body in volume_types(volume):
        if kind in _NAMED:
            key, resource = _NAMED[kind]
            name = body.get(key)
            if isinstance(name, str) and name:
                out.append(AccessNeed(f"{where}.{path}.{key}", "get", resource, name))
    return out


def reference_problems(spec: GLMDeploymentSpec) -> list[Finding]:
    """Secret and ConfigMap volume sources must name their object: an unnamed one cannot be checked."""
    out = []
    for i, volume in enumerate(spec.pod.volumes):
        for kind, path, body in volume_types(volume):
            key = _NAMED[kind][0] if kind in _NAMED else None
            if key is not None and not (isinstance(body.get(key), str) and body[key]):
                field = f"spec.pod.volumes[{i}].{path}.{key}"
                out.append(_f("volume", field, shown_json(body.get(key)), "must name the object", f"Set {key}"))
    return out


def new_access_needs(
    obj: dict[str, Any], old: dict[str, Any] | None, service_accounts: tuple[str, ...]
) -> list[AccessNeed]:
    """The access needs of `obj` that `old` (the stored object, on an update) did not already have.

    A reference checked when its author added it is not checked again for whoever updates the object later (the
    operator's own annotation patches included); a changed or added one is. An object that does not parse has none:
    admission refuses it for its schema first."""
    needs = _needs_of(obj, service_accounts)
    if not needs or old is None:
        return needs
    before = {(n.verb, n.resource, n.name) for n in _needs_of(old, service_accounts)}
    return [n for n in needs if (n.verb, n.resource, n.name) not in before]


def _needs_of(obj: dict[str, Any], service_accounts: tuple[str, ...]) -> list[AccessNeed]:
    try:
        spec = GLMDeploymentSpec.model_validate(obj.get("spec") or {})
    except ValueError:
        return []
    return access_needs(spec, service_accounts)
