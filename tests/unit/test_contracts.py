"""Contracts shared across modules (api/constants.py): what is rendered is what is watched and selected."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.constants import MANAGED, SERVING, VLLM_PORT, selector
from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.deployment import Observed, plan
from glm_operator.planner.stored import parse_stored
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def rendered(builder: B, lws: bool) -> list[dict[str, Any]]:
    body = admit(builder.namespace("ns").build(), CATALOGS).patched
    body["metadata"] |= {"uid": "u", "generation": 1}
    return list(plan(parse_stored(body), Observed(lws_available=lws), CATALOGS).apply)


def pod_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for o in objects:
        spec = o.get("spec") or {}
        if "template" in spec:
            out.append(spec["template"])
        group = spec.get("leaderWorkerTemplate") or {}
        out += [t for t in (group.get("leaderTemplate"), group.get("workerTemplate")) if t]
    return out


CASES = [
    ("deployment", B().accelerator("H200").tensor(8).vllm("0.33.0"), False),
    ("leaderworkerset", B().accelerator("H200").tensor(8).pipeline(2).vllm("0.33.0"), True),
    ("statefulsets", B().accelerator("H200").tensor(8).pipeline(2).vllm("0.33.0"), False),
]


@pytest.mark.parametrize("builder, lws", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_serving_pod_matches_the_watch_selector_and_the_service_selects_only_serving_pods(
    builder: B, lws: bool
) -> None:
    objects = rendered(builder, lws)
    serving = [t for t in pod_templates(objects) if (t["metadata"].get("labels") or {}).get("glmops.dev/serving")]
    assert serving, "no serving pod template rendered"
    for template in serving:
        labels = template["metadata"]["labels"]
        assert SERVING.items() <= labels.items(), labels  # the canary daemon's kopf watch sees this pod
        ports = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
        assert VLLM_PORT in ports
    service = next(o for o in objects if o["kind"] == "Service" and not o["spec"].get("clusterIP"))
    assert service["spec"]["selector"].items() >= {"glmops.dev/serving": "true"}.items()
    for o in objects:
        assert MANAGED.items() <= o["metadata"]["labels"].items(), o["kind"]  # the owned-object watch sees it


def test_selector_strings_are_what_kubernetes_parses() -> None:
    assert selector(SERVING) == "glmops.dev/serving=true,app.kubernetes.io/managed-by=glmops"
