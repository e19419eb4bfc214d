"""The demo's fleet has room for every sample it applies, all at once (make demo; hack/demo.sh)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.catalog import load_accelerators
from glm_operator.catalog.bundle import Catalogs
from glm_operator.cli.render import render_one
from glm_operator.render.fleet import DEMO_FLEET, TEST_FLEET, FleetShape, default_fleet
from tests.support.fit import Placement, place, pods_of

ROOT = Path(__file__).resolve().parents[2]
DEMO_NAMESPACE = "glmops-demo"
# What hack/demo.sh applies: every sample, then the one admitted with a failure no rule knows.
DEMO_MANIFESTS = [*sorted((ROOT / "samples").glob("*.yaml")), ROOT / "hack/demo/unknown-failure.yaml"]


def admitted_objects(path: Path, catalogs: Catalogs) -> list[dict[str, Any]]:
    """The objects the operator applies for a manifest admission lets in (none for one it refuses), as glmctl renders
    them; the demo's cluster serves no LeaderWorkerSet API, so replicas spanning nodes are indexed StatefulSets."""
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = DEMO_NAMESPACE
    objects = render_one(doc, catalogs, lws=False)
    return [] if isinstance(objects, str) else objects


def place_demo(shape: FleetShape) -> Placement:
    catalogs = Catalogs.packaged()
    pods = [pod for path in DEMO_MANIFESTS for pod in pods_of(admitted_objects(path, catalogs))]
    return place(pods, default_fleet(load_accelerators(), shape=shape))


def test_every_pod_of_every_admitted_demo_sample_fits_on_the_demo_fleet_at_once() -> None:
    placement = place_demo(DEMO_FLEET)
    assert not placement.unschedulable, "\n".join(
        f"{pod} fits nowhere:\n  " + "\n  ".join(reasons) for pod, reasons in placement.unschedulable.items()
    )
    assert len(placement.bound) >= 15, placement.bound


def test_the_tests_two_node_fleet_is_too_small_for_the_demo_so_the_check_can_fail() -> None:
    unschedulable = place_demo(TEST_FLEET).unschedulable
    assert any("h200" in pod for pod in unschedulable), unschedulable
    assert any("rtx" in pod for pod in unschedulable), unschedulable


def test_the_dedicated_pool_sample_lands_only_on_its_pool() -> None:
    bound = place_demo(DEMO_FLEET).bound
    pool_pods = {pod: node for pod, node in bound.items() if "dedicated-pool" in pod}
    assert len(pool_pods) == 2 and all("-glm-serving-" in node for node in pool_pods.values()), pool_pods
    others = {pod: node for pod, node in bound.items() if "dedicated-pool" not in pod}
    assert not any("-glm-serving-" in node for node in others.values()), others


@pytest.mark.parametrize("path", DEMO_MANIFESTS, ids=lambda p: p.name)
def test_each_demo_manifest_is_a_glmdeployment_with_a_distinct_name(path: Path) -> None:
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in DEMO_MANIFESTS]
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "GLMDeployment" and names.count(doc["metadata"]["name"]) == 1
