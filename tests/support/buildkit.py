"""What the tests of real image builds share."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, ClassVar

# A stand-in for vLLM's stock images (`vllm/vllm-openai:v<version>`), which cannot be pulled here: the Debian base
# (build argument BASE) and a vLLM version (VLLM_VERSION).
STAND_IN = """\
ARG BASE
FROM ${BASE}
ARG VLLM_VERSION
# What glmops' Dockerfile reads of vLLM's images: pip in the system interpreter, and vLLM's distribution record.
# (Debian's ensurepip refuses the system interpreter; pip runs from the wheel Debian ships for venv.)
RUN w=$(ls /usr/share/python-wheels/pip-*.whl) \\
    && python3 "$w/pip" install --quiet --break-system-packages --no-index --no-cache-dir "$w" \\
    && d=/usr/local/lib/python3.11/dist-packages/vllm-${VLLM_VERSION}.dist-info && mkdir -p "$d" \\
    && printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: %s\\n' "${VLLM_VERSION}" > "$d/METADATA"
"""


@dataclass(frozen=True)
class PlainRegistry:
    """An OCI registry spoken to over plain HTTP (the tests' own): tags' digests, manifests and image configs."""

    address: str
    accept: ClassVar[dict[str, str]] = {"Accept": "application/vnd.oci.image.manifest.v1+json"}

    def digest(self, repository: str, tag: str) -> str | None:
        """The manifest digest the registry serves for the tag; None when it has no such tag."""
        url = f"http://{self.address}/v2/{repository}/manifests/{tag}"
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, method="HEAD", headers=self.accept), timeout=10
            ) as r:
                return str(r.headers["Docker-Content-Digest"])
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def manifest(self, repository: str, digest: str) -> dict[str, Any]:
        url = f"http://{self.address}/v2/{repository}/manifests/{digest}"
        with urllib.request.urlopen(urllib.request.Request(url, headers=self.accept), timeout=10) as r:
            return dict(json.load(r))

    def image_config(self, repository: str, digest: str) -> dict[str, Any]:
        blob = self.manifest(repository, digest)["config"]["digest"]
        with urllib.request.urlopen(f"http://{self.address}/v2/{repository}/blobs/{blob}", timeout=10) as r:
            return dict(json.load(r))


def answers(url: str) -> bool:
    """Whether `url` answers at all (a server that is up)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False
