"""The accelerator catalog and the fake fleet built from it."""

from __future__ import annotations

import pytest

from glm_operator.api import AcceleratorType
from glm_operator.catalog import load_accelerators
from glm_operator.catalog.accelerators import parse_accelerators
from glm_operator.render.fleet import default_fleet


def test_catalog_covers_exactly_the_api_accelerator_types() -> None:
    assert set(load_accelerators().names()) == {t.value for t in AcceleratorType}


@pytest.mark.parametrize(
    "name, arch, family, platform, per_node",
    [
        ("GB200", "sm100", "sm100", "cuda", 4),
        ("GB300", "sm103", "sm100", "cuda", 4),
        ("B300", "sm103", "sm100", "cuda", 8),
        ("H200", "sm90", "sm90", "cuda", 8),
        ("RTX-PRO-6000", "sm120", "sm120", "cuda", 8),
        ("MI300X", "gfx942", "gfx942", "rocm", 8),
        ("MI355X", "gfx950", "gfx950", "rocm", 8),
    ],
)
def test_accelerator_facts(name: str, arch: str, family: str, platform: str, per_node: int) -> None:
    acc = load_accelerators().get(name)
    assert (acc.architecture, acc.arch_family, acc.platform, acc.gpus_per_node) == (arch, family, platform, per_node)


def test_unknown_accelerator_lookup_lists_the_known_types() -> None:
    with pytest.raises(KeyError, match="known types: B200, B300, GB200"):
        load_accelerators().get("A100")


def test_catalog_refuses_a_vendor_platform_mismatch() -> None:
    text = """accelerators:
  X1: {vendor: amd, platform: cuda, architecture: gfx950, archFamily: gfx950, memoryGiB: 1, gpusPerNode: 8,
       cpuArch: amd64, resourceName: amd.com/gpu, nodeSelector: {a: [b]}}
"""
    with pytest.raises(ValueError, match="vendor amd runs platform rocm"):
        parse_accelerators(text)


def test_fleet_has_gpu_nodes_of_every_type_with_vendor_labels_and_capacity() -> None:
    nodes = default_fleet(load_accelerators())
    by_type: dict[str, list[dict]] = {}
    for node in nodes:
        acc = node["metadata"]["labels"].get("glmops.dev/accelerator")
        if acc:
            by_type.setdefault(acc, []).append(node)
    assert set(by_type) == {t.value for t in AcceleratorType}
    gb200 = by_type["GB200"][0]
    assert gb200["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert gb200["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert gb200["status"]["capacity"]["nvidia.com/gpu"] == "4"
    mi355 = by_type["MI355X"][0]
    assert mi355["metadata"]["labels"]["amd.com/gpu.device-id"] == "75a3"
    assert mi355["status"]["capacity"]["amd.com/gpu"] == "8"
    assert mi355["spec"]["taints"] == [{"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert len(by_type["GB200"]) >= 4, "NVL72 tests need DP8 across trays"


def test_fleet_has_untainted_cpu_nodes_for_system_pods() -> None:
    cpu = [n for n in default_fleet(load_accelerators()) if n["metadata"]["name"].startswith("cpu-")]
    assert cpu and all("taints" not in n.get("spec", {}) for n in cpu)
