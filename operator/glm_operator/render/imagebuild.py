"""In-cluster builds of glmops' patched vLLM images: settings, the GLMImage, its build context and Job.

Pure: settings and a GLMImage in, Kubernetes objects out. The Dockerfile and build arguments come
from render/dockerfile.py; the plugin wheel's bytes are read by the caller. One GLMImage (named
after platform and tag) serves every GLMDeployment asking for the same image.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.constants import LABEL_PART_OF, MANAGED, MANAGED_BY
from glm_operator.api.glmimage import IMAGE_KIND, Builder, GLMImage
from glm_operator.api.v1alpha1 import API_VERSION, GLMDeploymentSpec
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import ImageCatalog
from glm_operator.render.dockerfile import PLUGIN_DIR_IN_OPERATOR, PLUGIN_WHEEL
from glm_operator.rules.context import resolve

# Pinned builder images. BuildKit's rootless image of the release cluster/versions.env pins (BUILDKIT_VERSION): the
# one tests/integration/test_buildkit_build.py builds from its Go module and runs the rendered build with. kaniko,
# whose upstream repository was archived in June 2025, stays an option at its last release: the *debug* image,
# because it has a shell (busybox) for the step that copies the context out of the ConfigMap volume (whose files
# are symlinks).
DEFAULT_BUILDKIT_IMAGE = "moby/buildkit:v0.34.2-rootless"
DEFAULT_KANIKO_IMAGE = "gcr.io/kaniko-project/executor:v1.23.2-debug"
# A ConfigMap holds at most 1 MiB of data and binaryData together; keep room for metadata.
CONFIGMAP_LIMIT_BYTES = 1_000_000
IMAGE_LABEL = "glmops.dev/image"
BUILD_CONTAINER = "build"
WORKSPACE = "/workspace"
DOCKER_CONFIG_DIR = "/etc/glmops/docker"
REGISTRY_CA_DIR = "/etc/glmops/registry-ca"
REGISTRY_CA_KEY = "ca.crt"
# The context ConfigMap, mounted as it is into the build container for BuildKit's daemon configuration.
BUILD_CONFIG_DIR = "/etc/glmops/build"
BUILDKITD_CONFIG = "buildkitd.toml"
_TRUE = {"1", "true", "yes", "on"}


class ImageBuildError(ValueError):
    """Settings or a build context that cannot work; the message says what to change."""


@dataclass(frozen=True)
class BuildSettings:
    """Operator-wide image build settings (GLMOPS_IMAGE_BUILD_* env, chart values imageBuild.*)."""

    enabled: bool = False
    registry: str = ""
    builder: Builder = Builder.BUILDKIT
    kaniko_image: str = DEFAULT_KANIKO_IMAGE
    buildkit_image: str = DEFAULT_BUILDKIT_IMAGE
    push_secret: str = ""
    namespace: str = "glmops-system"
    insecure: bool = False
    # BuildKit's layer cache kept in the registry beside the image (`<ref>-buildcache`), so a build in a new pod
    # (every build Job's is) reuses the steps an earlier build ran; off, each build starts from the base alone.
    cache: bool = True
    # A ConfigMap in the build namespace whose `ca.crt` holds the certificate authority of a registry with a
    # certificate from a private authority: the build trusts it for that registry, and so does the operator's
    # digest check. Empty: the system's authorities only.
    registry_ca: str = ""
    # Registry mirrors the build pulls through, by registry host ({"docker.io": ["mirror.example.com"]}): how an
    # air-gapped cluster reaches vLLM's stock images, the builds' bases. With `insecure` they speak plain HTTP too.
    mirrors: dict[str, list[str]] = field(default_factory=dict)
    # Where build pods may run, besides amd64 nodes: more node labels, and the taints they tolerate.
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    # The build container's resources: a vLLM base is many GiB unpacked, so the default asks for room to hold it.
    resources: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_BUILD_RESOURCES))
    plugin_wheel: str = f"{PLUGIN_DIR_IN_OPERATOR}/{PLUGIN_WHEEL}"
    deadline_seconds: int = 7200
    ttl_seconds: int = 86400
    poll_seconds: float = 10.0
    # Test-only: annotations added to the build pod, by GLMImage name ("*": every one), so the fake
    # kubelet (cluster/kwok-stages.yaml) knows which exit code and termination message to report.
    # It exists for the fake kubelet alone; real clusters leave it empty.
    pod_annotations: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> BuildSettings:
        def get(name: str, default: str = "") -> str:
            return env.get(f"GLMOPS_IMAGE_BUILD_{name}", "") or default

        enabled = get("ENABLED").lower() in _TRUE
        registry = get("REGISTRY").rstrip("/")
        if enabled and not registry:
            raise ImageBuildError("GLMOPS_IMAGE_BUILD_ENABLED is on but GLMOPS_IMAGE_BUILD_REGISTRY is empty")
        if get("REGISTRY_CA") and get("INSECURE").lower() in _TRUE:
            raise ImageBuildError(
                "GLMOPS_IMAGE_BUILD_REGISTRY_CA is for a registry with TLS, GLMOPS_IMAGE_BUILD_INSECURE for one"
                " without: set one of them (imageBuild.registryCA or imageBuild.insecure)"
            )
        if get("CACHE", "registry") not in ("registry", "off"):
            raise ImageBuildError(f"GLMOPS_IMAGE_BUILD_CACHE is {get('CACHE')!r}; use registry or off")
        try:
            builder = Builder(get("BUILDER", Builder.BUILDKIT.value))
            annotations = json.loads(get("POD_ANNOTATIONS", "{}"))
            return cls(
                enabled=enabled,
                registry=registry,
                builder=builder,
                kaniko_image=get("KANIKO_IMAGE", DEFAULT_KANIKO_IMAGE),
                buildkit_image=get("BUILDKIT_IMAGE", DEFAULT_BUILDKIT_IMAGE),
                push_secret=get("PUSH_SECRET"),
                namespace=get("NAMESPACE", env.get("POD_NAMESPACE", "") or "glmops-system"),
                insecure=get("INSECURE").lower() in _TRUE,
                cache=get("CACHE", "registry") != "off",
                registry_ca=get("REGISTRY_CA"),
                mirrors=_mirrors(json.loads(get("REGISTRY_MIRRORS", "{}"))),
                node_selector=_string_map("GLMOPS_IMAGE_BUILD_NODE_SELECTOR", json.loads(get("NODE_SELECTOR", "{}"))),
                tolerations=_tolerations(json.loads(get("TOLERATIONS", "[]"))),
                resources=_resources(json.loads(get("RESOURCES", "null"))),
                plugin_wheel=get("PLUGIN_WHEEL", cls.plugin_wheel),
                deadline_seconds=int(get("DEADLINE_SECONDS", "7200")),
                ttl_seconds=int(get("TTL_SECONDS", "86400")),
                poll_seconds=float(get("POLL_SECONDS", "10")),
                pod_annotations={
                    str(image): {str(k): str(v) for k, v in dict(values).items()}
                    for image, values in dict(annotations).items()
                },
            )
        except (ValueError, TypeError) as err:
            raise ImageBuildError(f"GLMOPS_IMAGE_BUILD_*: {err}") from err

    def __post_init__(self) -> None:
        if self.node_selector.get(ARCH_LABEL, "amd64") != "amd64":
            raise ImageBuildError(
                f"GLMOPS_IMAGE_BUILD_NODE_SELECTOR sets {ARCH_LABEL}={self.node_selector[ARCH_LABEL]}: builds pull and"
                " run vLLM's amd64 images, so build pods run on amd64 nodes; drop that label"
            )
        if self.builder is Builder.KANIKO and set(self.mirrors) - {"docker.io"}:
            raise ImageBuildError(
                "GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS: kaniko mirrors Docker Hub only (--registry-mirror); "
                f"{', '.join(sorted(set(self.mirrors) - {'docker.io'}))} needs builder buildkit"
            )

    @property
    def builder_image(self) -> str:
        return self.kaniko_image if self.builder is Builder.KANIKO else self.buildkit_image


ARCH_LABEL = "kubernetes.io/arch"
DEFAULT_BUILD_RESOURCES: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "100Gi"}}
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def _string_map(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{name} must be a JSON object of strings, got {json.dumps(value)[:200]}")
    return {str(k): v for k, v in value.items()}


def _mirrors(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict) or not all(
        isinstance(v, list) and v and all(isinstance(m, str) and m for m in v) for v in value.values()
    ):
        raise ValueError(
            "GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS must map a registry host to a list of mirrors, "
            'e.g. {"docker.io": ["mirror.example.com"]}'
        )
    return {str(host): [m.rstrip("/") for m in found] for host, found in value.items()}


def _tolerations(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) and set(t) <= _TOLERATION_KEYS for t in value):
        raise ValueError(
            "GLMOPS_IMAGE_BUILD_TOLERATIONS must be a JSON list of tolerations "
            f"(fields {', '.join(sorted(_TOLERATION_KEYS))})"
        )
    return [dict(t) for t in value]


def _resources(value: Any) -> dict[str, Any]:
    if value is None:
        return dict(DEFAULT_BUILD_RESOURCES)
    if not isinstance(value, dict) or set(value) - {"requests", "limits"}:
        raise ValueError("GLMOPS_IMAGE_BUILD_RESOURCES must be a JSON object with requests and/or limits")
    return {key: _string_map(f"GLMOPS_IMAGE_BUILD_RESOURCES.{key}", found) for key, found in value.items()}


def registry_host(ref: str) -> str:
    """The registry host of an image reference (Docker Hub for a bare name)."""
    first = ref.split("/", 1)[0]
    return first if "/" in ref and ("." in first or ":" in first or first == "localhost") else "docker.io"


def image_name(platform: str, ref: str) -> str:
    """The GLMImage name of one patched image: `vllm-<platform>-<tag>`, e.g. vllm-cuda-v0-33-0-glmops-1."""
    tag = ref.split("@", 1)[0].rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    return re.sub(r"[^a-z0-9]+", "-", f"vllm-{platform}-{tag}".lower()).strip("-")[:63]


def needs_build(settings: BuildSettings, images: ImageCatalog, image: str, platform: str, version: str | None) -> bool:
    """Whether a plan's image is one the operator builds: glmops' patched image in the configured registry."""
    if not settings.enabled or version is None or "@" in image or version not in images.versions:
        return False
    return image == images.patched_ref(platform, version)


def glmimage_manifest(
    platform: str, version: str, ref: str, patches: tuple[str, ...], builder: Builder
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": IMAGE_KIND,
        "metadata": {
            "name": image_name(platform, ref),
            "labels": {**MANAGED, LABEL_PART_OF: MANAGED_BY},
        },
        "spec": {
            "vllmVersion": version,
            "platform": platform,
            "image": ref,
            "patches": list(patches),
            "builder": builder.value,
        },
    }


def _object_name(image: GLMImage, suffix: str) -> str:
    # The uid makes a GLMImage re-created after a failure get a fresh Job, even while the old one's
    # garbage collection is still under way.
    uid = str(image.metadata.get("uid", ""))[:8]
    return f"{image.metadata['name'][:40]}-{suffix}-{uid}".strip("-")


def context_name(image: GLMImage) -> str:
    return _object_name(image, "context")


def job_name(image: GLMImage) -> str:
    return _object_name(image, "build")


def _meta(image: GLMImage, name: str, namespace: str) -> dict[str, Any]:
    owner = {
        "apiVersion": API_VERSION,
        "kind": IMAGE_KIND,
        "name": image.metadata["name"],
        "uid": image.metadata.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            IMAGE_LABEL: image.metadata["name"],
            **MANAGED,
            "app.kubernetes.io/component": "image-build",
        },
        "ownerReferences": [owner],
    }


def buildkitd_config(image: GLMImage, settings: BuildSettings) -> str | None:
    """BuildKit's daemon configuration, where the defaults do not do: the registry's own certificate authority, and
    mirrors (plain HTTP ones, with `insecure`); None when the defaults do."""
    if settings.builder is not Builder.BUILDKIT or not (settings.registry_ca or settings.mirrors):
        return None
    hosts: dict[str, list[str]] = {}
    for host, mirrors in settings.mirrors.items():
        hosts.setdefault(host, []).append(f"mirrors = [{', '.join(json.dumps(m) for m in mirrors)}]")
        for mirror in mirrors:
            if settings.insecure:
                hosts.setdefault(mirror.split("/", 1)[0], []).extend(["http = true", "insecure = true"])
    if settings.registry_ca:
        # TLS, said outright: BuildKit would otherwise try plain HTTP first for a registry on a loopback address.
        ca = f"{REGISTRY_CA_DIR}/{REGISTRY_CA_KEY}"
        hosts.setdefault(registry_host(image.spec.image), []).extend(["http = false", f'ca = ["{ca}"]'])
    return "".join(f'[registry."{host}"]\n' + "".join(f"  {line}\n" for line in lines) for host, lines in hosts.items())


def context_configmap(image: GLMImage, settings: BuildSettings, dockerfile: str, wheel: bytes) -> dict[str, Any]:
    """The build context: the Dockerfile as data, the plugin wheel as binaryData (and BuildKit's daemon
    configuration, which the build reads from the mounted ConfigMap, not from the context)."""
    config = buildkitd_config(image, settings)
    size = len(dockerfile.encode()) + len(wheel) + len((config or "").encode())
    if size > CONFIGMAP_LIMIT_BYTES:
        raise ImageBuildError(
            f"build context of {image.metadata['name']} is {size} bytes; a ConfigMap holds at most "
            f"{CONFIGMAP_LIMIT_BYTES}. Ship a smaller plugin wheel (it carries no dependencies)"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(image, context_name(image), settings.namespace),
        "data": {"Dockerfile": dockerfile, **({BUILDKITD_CONFIG: config} if config else {})},
        "binaryData": {PLUGIN_WHEEL: base64.b64encode(wheel).decode()},
    }


def _kaniko(image: GLMImage, settings: BuildSettings, args: dict[str, str]) -> dict[str, Any]:
    host = registry_host(image.spec.image)
    flags = [
        f"--dockerfile={WORKSPACE}/Dockerfile",
        f"--context=dir://{WORKSPACE}",
        f"--destination={image.spec.image}",
        *(f"--build-arg={key}={value}" for key, value in sorted(args.items())),
        # The kubelet reports this file as the container's termination message: the operator reads
        # the digest from the pod's status, no log scraping.
        "--digest-file=/dev/termination-log",
    ]
    if settings.insecure:
        flags += [f"--insecure-registry={host}", f"--skip-tls-verify-registry={host}"]
    if settings.registry_ca:
        flags.append(f"--registry-certificate={host}={REGISTRY_CA_DIR}/{REGISTRY_CA_KEY}")
    flags += [f"--registry-mirror={mirror}" for mirror in settings.mirrors.get("docker.io", [])]
    return {
        "command": ["/kaniko/executor"],
        "args": flags,
        # kaniko unpacks the base image's filesystem in its own container, which needs root there;
        # the container is still unprivileged and cannot gain privileges. Use buildkit for rootless.
        "securityContext": {"runAsUser": 0, "privileged": False, "allowPrivilegeEscalation": False},
    }


# buildctl has no digest file: its metadata file holds containerimage.digest, copied to the
# termination log so both builders report the digest the same way.
_BUILDKIT_SCRIPT = (
    'set -eu; buildctl-daemonless.sh "$@" --metadata-file /tmp/build.json; '
    'sed -n \'s/.*"containerimage.digest": *"\\(sha256:[0-9a-f]*\\)".*/\\1/p\' /tmp/build.json'
    " | head -n 1 > /dev/termination-log"
)


# How many times buildctl-daemonless.sh asks the daemon it started whether it is up before it gives up. The
# script's default (10) is about 2.2 s of waiting (it sleeps 100 ms + 20 ms per try): on a node under load rootless
# buildkitd was seen not to answer within that, failing the build with an empty daemon log. 60 tries wait about
# 43 s: a daemon that does not start within that has a reason, and its log is printed with the failure.
BUILDKITD_START_TRIES = 60


def cache_ref(ref: str) -> str:
    """Where BuildKit keeps an image's layer cache: the same repository, tag `<tag>-buildcache` (the push secret
    that reaches the image reaches it, and the base's layers are already there: nothing large is uploaded twice)."""
    repository, _, tag = ref.split("@", 1)[0].rpartition(":")
    return f"{repository}:{tag}-buildcache" if repository and "/" not in tag else f"{ref}:buildcache"


def _buildkit(image: GLMImage, settings: BuildSettings, args: dict[str, str]) -> dict[str, Any]:
    insecure = ",registry.insecure=true" if settings.insecure else ""
    flags = [
        "build",
        "--frontend=dockerfile.v0",
        f"--local=context={WORKSPACE}",
        f"--local=dockerfile={WORKSPACE}",
        *(f"--opt=build-arg:{key}={value}" for key, value in sorted(args.items())),
        f"--output=type=image,name={image.spec.image},push=true{insecure}",
    ]
    if settings.cache:
        # Every step's layers (mode=max), read back by the next build of the image; a cache that cannot be read
        # (the first build) or written is a slower build, never a failed one (ignore-error).
        cache = f"type=registry,ref={cache_ref(image.spec.image)}{insecure}"
        flags += [f"--import-cache={cache}", f"--export-cache={cache},mode=max,ignore-error=true"]
    daemon = ["--oci-worker-no-process-sandbox"]
    config_mount: list[dict[str, Any]] = []
    if buildkitd_config(image, settings) is not None:
        daemon.append(f"--config={BUILD_CONFIG_DIR}/{BUILDKITD_CONFIG}")
        config_mount.append({"name": "context-src", "mountPath": BUILD_CONFIG_DIR, "readOnly": True})
    return {
        "command": ["/bin/sh", "-c", _BUILDKIT_SCRIPT, "buildctl"],
        "args": flags,
        # Rootless BuildKit: an unprivileged user; rootlesskit maps the image's subordinate IDs into a user
        # namespace with newuidmap/newgidmap, whose file capabilities (CAP_SETUID, CAP_SETGID) take effect only
        # when privilege escalation is allowed: with allowPrivilegeEscalation false the runtime sets
        # no_new_privs and rootlesskit stops at "newuidmap: write to uid_map failed" (docs/image-builds.md).
        # BuildKit's own rootless Job leaves it allowed too. No capability is added; without a process
        # sandbox its mounts need seccomp and AppArmor unconfined.
        "env": [
            {"name": "BUILDKITD_FLAGS", "value": " ".join(daemon)},
            {"name": "BUILDCTL_CONNECT_RETRIES_MAX", "value": str(BUILDKITD_START_TRIES)},
        ],
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": True,
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        },
        "volumeMounts": [{"name": "buildkitd", "mountPath": "/home/user/.local/share/buildkit"}, *config_mount],
    }


def _volumes(image: GLMImage, settings: BuildSettings) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "context-src", "configMap": {"name": context_name(image)}},
        {"name": "context", "emptyDir": {}},
    ]
    if settings.push_secret:
        items = [{"key": ".dockerconfigjson", "path": "config.json"}]
        volumes.append({"name": "docker-config", "secret": {"secretName": settings.push_secret, "items": items}})
    if settings.registry_ca:
        items = [{"key": REGISTRY_CA_KEY, "path": REGISTRY_CA_KEY}]
        volumes.append({"name": "registry-ca", "configMap": {"name": settings.registry_ca, "items": items}})
    if settings.builder is Builder.BUILDKIT:
        volumes.append({"name": "buildkitd", "emptyDir": {}})
    return volumes


def _copy_context(settings: BuildSettings, security: dict[str, Any]) -> dict[str, Any]:
    """An init container that copies the context out of the ConfigMap volume, whose files are symlinks."""
    cp = "/busybox/cp" if settings.builder is Builder.KANIKO else "cp"
    return {
        "name": "context",
        "image": settings.builder_image,
        "command": [cp, "-L", "/context-src/Dockerfile", f"/context-src/{PLUGIN_WHEEL}", f"{WORKSPACE}/"],
        "securityContext": security,
        "volumeMounts": [
            {"name": "context-src", "mountPath": "/context-src", "readOnly": True},
            {"name": "context", "mountPath": WORKSPACE},
        ],
    }


def build_job(image: GLMImage, settings: BuildSettings, args: dict[str, str]) -> dict[str, Any]:
    """The Job that builds and pushes one GLMImage; it runs once (a failed build is not retried)."""
    spec = (_kaniko if settings.builder is Builder.KANIKO else _buildkit)(image, settings, args)
    mounts = [{"name": "context", "mountPath": WORKSPACE}, *spec.pop("volumeMounts", [])]
    env = list(spec.pop("env", []))
    if settings.push_secret:
        mounts.append({"name": "docker-config", "mountPath": DOCKER_CONFIG_DIR, "readOnly": True})
        env.append({"name": "DOCKER_CONFIG", "value": DOCKER_CONFIG_DIR})
    if settings.registry_ca:
        mounts.append({"name": "registry-ca", "mountPath": REGISTRY_CA_DIR, "readOnly": True})
    container = {
        "name": BUILD_CONTAINER,
        "image": settings.builder_image,
        **spec,
        "env": env,
        "volumeMounts": mounts,
        # On failure the kubelet puts the end of the build log into the termination message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": settings.resources,
    }
    meta = _meta(image, job_name(image), settings.namespace)
    test_annotations = settings.pod_annotations
    annotations = {**test_annotations.get("*", {}), **test_annotations.get(image.metadata["name"], {})}
    pod_meta = {"labels": dict(meta["labels"]), "annotations": annotations}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.deadline_seconds,
            "ttlSecondsAfterFinished": settings.ttl_seconds,
            "template": {
                "metadata": pod_meta,
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    # The build pulls and runs the base image's own architecture: vLLM's are amd64.
                    "nodeSelector": {**settings.node_selector, ARCH_LABEL: "amd64"},
                    **({"tolerations": settings.tolerations} if settings.tolerations else {}),
                    "initContainers": [_copy_context(settings, container["securityContext"])],
                    "containers": [container],
                    "volumes": _volumes(image, settings),
                },
            },
        },
    }


def planned_image(spec: dict[str, Any], catalogs: Catalogs) -> str | None:
    """The image a GLMDeployment's spec resolves to; None for a spec that does not parse."""
    try:
        return resolve(GLMDeploymentSpec.model_validate(spec), catalogs).image.ref
    except (ValueError, KeyError, LookupError):
        return None
