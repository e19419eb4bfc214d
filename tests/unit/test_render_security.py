"""The vLLM containers glmops renders run with every capability dropped, no escalation and seccomp."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.render.security import vllm_security_context
from tests.support.cluster import REPO
from tests.unit.test_render import rendered, sample

SAMPLES = sorted(p.name for p in (REPO / "samples").glob("*.yaml") if "broken" not in p.name)


def _containers(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every container of every pod template the render produced (Deployments, StatefulSets, LWS leader/worker)."""
    out: list[dict[str, Any]] = []
    for obj in objs:
        spec = obj.get("spec", {})
        templates = [spec.get("template")]
        lws = spec.get("leaderWorkerTemplate", {})
        templates += [lws.get("leaderTemplate"), lws.get("workerTemplate")]
        for template in filter(None, templates):
            out += template["spec"].get("initContainers", []) + template["spec"]["containers"]
    return out


@pytest.mark.parametrize("lws", [True, False], ids=["leaderworkerset", "statefulsets"])
@pytest.mark.parametrize("name", SAMPLES)
def test_every_rendered_vllm_container_is_locked_down(name: str, lws: bool) -> None:
    obj = sample(name)
    _, objs = rendered(obj, lws=lws)
    containers = _containers(objs)
    # RDMA (spec.network.rdma) is the one setting that adds a capability: IPC_LOCK, to pin its buffers.
    expected: dict[str, list[str]] = {"drop": ["ALL"]}
    if (obj["spec"].get("network") or {}).get("rdma") is not None:
        expected["add"] = ["IPC_LOCK"]
    assert containers, "the render produced no pod template"
    for container in containers:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
        assert context["capabilities"] == expected
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        # The image's user: the official vLLM images run as root with their cache under /root.
        assert "runAsUser" not in context and "runAsNonRoot" not in context


@pytest.mark.parametrize(
    "extra, added",
    [
        ((), None),
        (("IPC_LOCK",), ["IPC_LOCK"]),
        (("ipc_lock", "IPC_LOCK"), ["IPC_LOCK"]),
        (["SYS_NICE", "IPC_LOCK"], ["IPC_LOCK", "SYS_NICE"]),
    ],
)
def test_extra_capabilities_are_added_while_every_other_stays_dropped(extra: Any, added: list[str] | None) -> None:
    context = vllm_security_context(extra)
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["capabilities"].get("add") == added
    assert context["allowPrivilegeEscalation"] is False


def test_each_call_returns_its_own_context() -> None:
    first = vllm_security_context()
    first["seccompProfile"]["type"] = "Unconfined"
    first["capabilities"]["drop"].append("X")
    assert vllm_security_context() == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
