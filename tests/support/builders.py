"""Small builders for test objects, so tests say what differs instead of copying YAML."""

from __future__ import annotations

import copy
import json
from typing import Any, Self

from glm_operator.api.constants import CANARY_CONDITION, Reason


class GLMDeploymentBuilder:
    """GLMDeploymentBuilder().accelerator("GB200").data(8).expert().build() -> a manifest dict."""

    def __init__(self, name: str = "glm", model: str = "zai-org/GLM-5.3") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "glmops.dev/v1alpha1",
            "kind": "GLMDeployment",
            "metadata": {"name": name},
            "spec": {
                "model": {"name": model},
                "accelerator": {"type": "H200"},
                "parallelism": {},
                "engine": {},
            },
        }

    @property
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def name(self, name: str) -> Self:
        self._obj["metadata"]["name"] = name
        return self

    def namespace(self, namespace: str) -> Self:
        self._obj["metadata"]["namespace"] = namespace
        return self

    def model(self, name: str) -> Self:
        self._spec["model"]["name"] = name
        return self

    def accelerator(self, type_: str, gpus_per_node: int | None = None) -> Self:
        self._spec["accelerator"] = {"type": type_}
        if gpus_per_node is not None:
            self._spec["accelerator"]["gpusPerNode"] = gpus_per_node
        return self

    def tensor(self, n: int) -> Self:
        self._spec["parallelism"]["tensor"] = n
        return self

    def pipeline(self, n: int) -> Self:
        self._spec["parallelism"]["pipeline"] = n
        return self

    def data(self, n: int) -> Self:
        self._spec["parallelism"]["data"] = n
        return self

    def expert(self, on: bool = True) -> Self:
        self._spec["parallelism"]["expert"] = on
        return self

    def vllm(self, version: str) -> Self:
        self._spec["engine"]["vllmVersion"] = version
        return self

    def image(self, image: str) -> Self:
        self._spec["engine"]["image"] = image
        return self

    def mtp(self, tokens: int) -> Self:
        self._spec["engine"]["speculative"] = {"method": "mtp", "numSpeculativeTokens": tokens}
        return self

    def env(self, name: str, value: str) -> Self:
        self._spec["engine"].setdefault("env", []).append({"name": name, "value": value})
        return self

    def replicas(self, n: int) -> Self:
        self._spec["replicas"] = n
        return self

    def remediation(self, mode: str) -> Self:
        self._spec["validation"] = {"remediation": mode}
        return self

    def set(self, dotted: str, value: Any) -> Self:
        """Set any field by path, e.g. set("spec.parallelism.tensor", "two") for malformed input."""
        *parents, leaf = dotted.split(".")
        node = self._obj
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        return self

    def drop(self, dotted: str) -> Self:
        *parents, leaf = dotted.split(".")
        node = self._obj
        for key in parents:
            node = node[key]
        node.pop(leaf, None)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def gate_patch(status: str = "True", reason: str = Reason.CANARY_PASSED) -> str:
    """A pod status patch setting the canary gate condition, as `kubectl patch --subresource=status` takes it."""
    condition = {"type": CANARY_CONDITION, "status": status, "reason": reason}
    return json.dumps({"status": {"conditions": [condition]}}, separators=(",", ":"))
