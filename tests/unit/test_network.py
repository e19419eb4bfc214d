"""spec.network: what every pod of a replica gets, and what admission says about it."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from typing import Any

import pytest
import yaml

from glm_operator.api import GLMDeployment
from glm_operator.catalog.bundle import Catalogs
from glm_operator.control.runtime import Runtime
from glm_operator.k8s.catalog import CatalogSource
from glm_operator.render.fleet import FAKE_RDMA_RESOURCE, default_fleet
from glm_operator.render.network import MULTUS_ANNOTATION
from glm_operator.render.plan import build_plan
from glm_operator.render.workloads import render_objects
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import pinned_helm
from tests.unit.test_alerts import CHART

CATALOGS = Catalogs.packaged()
WITH_DEFAULT = replace(CATALOGS, default_rdma_resource="rdma/rdma_shared_device_b")
OWNER = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "name": "x", "uid": "uid-1"}
RDMA = "rdma/rdma_shared_device_a"
FULL = {
    "rdma": {"resourceName": RDMA, "count": 2},
    "secondaryNetworks": ["ib-net", "other/ib-net2@ib1"],
    "ibHCAs": "mlx5_0,mlx5_1",
    "socketInterface": "net1",
}
MESSAGE = re.compile(r'^spec\.([\w.\[\]]|\["[^"]+"\])+: .+: .+ \(rule network/[\w-]+\)\. .+\.$')


def multi_node(network: dict[str, Any], accelerator: str = "H200") -> B:
    """Two 8-GPU nodes per replica (TP8 x PP2)."""
    return B().accelerator(accelerator).tensor(8).pipeline(2).set("spec.network", network)


def pods(obj: dict[str, Any], lws: bool, catalogs: Catalogs = CATALOGS) -> list[dict[str, Any]]:
    """Every pod template rendered for the object: Deployment, LWS leader and worker, each StatefulSet."""
    obj.setdefault("metadata", {}).setdefault("namespace", "ns")
    result = admit(obj, catalogs)
    assert result.allowed, result.rejection()
    glmd = GLMDeployment.model_validate(result.patched)
    out = []
    for o in render_objects(build_plan(glmd, catalogs), glmd, OWNER, lws):
        if o["kind"] == "LeaderWorkerSet":
            out += [o["spec"]["leaderWorkerTemplate"][t] for t in ("leaderTemplate", "workerTemplate")]
        elif o["kind"] in ("Deployment", "StatefulSet"):
            out.append(o["spec"]["template"])
    return out


def env_of(template: dict[str, Any]) -> dict[str, str]:
    env = template["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"an env name twice: {names}"
    return {e["name"]: e.get("value", "<from>") for e in env}


@pytest.mark.parametrize(
    "builder, lws, templates",
    [
        (multi_node(FULL), True, 2),
        (multi_node(FULL), False, 1),
        (multi_node(FULL).replicas(3), False, 3),
        (multi_node(FULL, "MI355X").model("amd/GLM-5.2-MXFP4"), True, 2),
    ],
)
def test_every_pod_of_a_multi_node_replica_gets_the_rdma_devices_capability_env_and_networks(
    builder: B, lws: bool, templates: int
) -> None:
    rendered = pods(builder.build(), lws)
    assert len(rendered) == templates
    for template in rendered:
        container = template["spec"]["containers"][0]
        assert container["resources"]["requests"][RDMA] == "2"
        assert container["resources"]["limits"][RDMA] == "2"
        # IPC_LOCK is the one capability added; every other one stays dropped, nothing else is loosened.
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert template["metadata"]["annotations"][MULTUS_ANNOTATION] == "ib-net,other/ib-net2@ib1"
        env = env_of(template)
        assert env["NCCL_IB_DISABLE"] == "0"
        assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "net1"


@pytest.mark.parametrize(
    "network, absent_env, capabilities, annotated",
    [
        ({}, {"NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}, None, False),
        ({"socketInterface": "eth1"}, {"NCCL_IB_DISABLE", "NCCL_IB_HCA"}, None, False),
        ({"secondaryNetworks": ["roce"]}, {"NCCL_IB_DISABLE"}, None, True),
        ({"rdma": {"resourceName": RDMA}}, {"NCCL_IB_HCA", "GLOO_SOCKET_IFNAME"}, ["IPC_LOCK"], False),
    ],
)
def test_only_what_spec_network_asks_for_is_rendered(
    network: dict[str, Any], absent_env: set[str], capabilities: list[str] | None, annotated: bool
) -> None:
    for template in pods(multi_node(network).build(), lws=True):
        container = template["spec"]["containers"][0]
        assert not absent_env & set(env_of(template))
        assert container.get("securityContext", {}).get("capabilities", {}).get("add") == capabilities
        assert (MULTUS_ANNOTATION in template["metadata"]["annotations"]) is annotated
        rdma = [r for r in container["resources"]["limits"] if r.startswith("rdma/")]
        assert rdma == ([RDMA] if "rdma" in network else [])


@pytest.mark.parametrize("name", ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE"])
def test_a_variable_set_in_engine_env_wins_and_is_never_rendered_twice(name: str) -> None:
    for template in pods(multi_node(FULL).env(name, "users-own").build(), lws=True):
        assert env_of(template)[name] == "users-own"


def test_rdma_without_a_resource_name_requests_the_operators_default() -> None:
    templates = pods(multi_node({"rdma": {}}).build(), lws=False, catalogs=WITH_DEFAULT)
    limits = templates[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["rdma/rdma_shared_device_b"] == "1"


def test_the_operators_default_comes_from_the_chart_value_through_the_environment() -> None:
    source = CatalogSource(None, default_rdma_resource="rdma/hca")
    assert source.get().default_rdma_resource == "rdma/hca"
    assert CatalogSource(None).get().default_rdma_resource is None
    runtime = Runtime.from_env({"GLMOPS_RDMA_RESOURCE": "rdma/hca"})
    assert runtime.catalogs.get().default_rdma_resource == "rdma/hca"
    assert Runtime.from_env({"GLMOPS_RDMA_RESOURCE": " "}).catalogs.get().default_rdma_resource is None


def _operator_env(*sets: str) -> subprocess.CompletedProcess[str] | dict[str, str]:
    helm = pinned_helm()
    if not helm.is_file():
        pytest.skip(f"helm is not built at {helm}: run cluster/build.sh (make tools)")
    args = [str(helm), "template", "glmops", str(CHART), "--namespace", "glmops-system", *TEMPLATE_FLAGS]
    for value in sets:
        args += ["--set", value]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return proc
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment"]
    return {e["name"]: e.get("value", "") for e in docs[0]["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    "sets, expected",
    [
        ((), None),
        (("network.rdmaResource=rdma/rdma_shared_device_a",), "rdma/rdma_shared_device_a"),
        (("network.rdmaResource=nvidia.com/cx7_sriov",), "nvidia.com/cx7_sriov"),
    ],
)
def test_the_chart_value_network_rdma_resource_becomes_the_operators_environment(
    sets: tuple[str, ...], expected: str | None
) -> None:
    env = _operator_env(*sets)
    assert isinstance(env, dict), env
    assert env.get("GLMOPS_RDMA_RESOURCE") == expected


@pytest.mark.parametrize("value", ["no-slash", "nvidia.com/", "UPPER.com/x"])
def test_the_chart_refuses_a_malformed_rdma_resource(value: str) -> None:
    proc = _operator_env(f"network.rdmaResource={value}")
    assert isinstance(proc, subprocess.CompletedProcess), f"{value} accepted"
    assert "rdmaResource" in proc.stderr


def test_every_fake_gpu_node_advertises_the_rdma_resource_and_cpu_nodes_do_not() -> None:
    for node in default_fleet(CATALOGS.accelerators):
        gpu = bool(node.get("spec", {}).get("taints"))
        assert (FAKE_RDMA_RESOURCE in node["status"]["allocatable"]) is gpu


def findings(obj: dict[str, Any], catalogs: Catalogs = CATALOGS) -> list[tuple[str, str, str]]:
    result = admit(obj, catalogs)
    return [(f.rule, f.severity, f.message) for f in result.findings if f.rule.startswith("network/")]


@pytest.mark.parametrize(
    "builder, catalogs, rule, severity, fragments",
    [
        (
            multi_node({"rdma": {}}),
            CATALOGS,
            "network/rdma-resource",
            "error",
            ["spec.network.rdma.resourceName: <unset>:", "Set spec.network.rdma.resourceName", "network.rdmaResource"],
        ),
        (
            multi_node({"rdma": {"resourceName": "nvidia.com/gpu"}}),
            CATALOGS,
            "network/rdma-resource",
            "error",
            ["spec.network.rdma.resourceName: nvidia.com/gpu: is a GPU resource", "e.g. rdma/rdma_shared_device_a"],
        ),
        (
            multi_node({"rdma": {"resourceName": "amd.com/gpu"}}, "MI355X").model("amd/GLM-5.2-MXFP4"),
            CATALOGS,
            "network/rdma-resource",
            "error",
            ["amd.com/gpu: is a GPU resource"],
        ),
        (
            multi_node({"rdma": {"resourceName": "example.kubernetes.io/hca"}}),
            CATALOGS,
            "network/rdma-resource",
            "error",
            ["example.kubernetes.io/hca: is in the kubernetes.io domain"],
        ),
        (
            multi_node({"rdma": {"resourceName": "rdma/" + "h" * 64}}),
            CATALOGS,
            "network/rdma-resource",
            "error",
            ["is too long for a resource name"],
        ),
        (
            multi_node({"rdma": {}}),
            replace(CATALOGS, default_rdma_resource="nvidia.com/gpu"),
            "network/rdma-resource",
            "error",
            ["nvidia.com/gpu (the operator's default): is a GPU resource", "chart value network.rdmaResource"],
        ),
        (
            B().accelerator("H200").tensor(8).set("spec.network", {"rdma": {"resourceName": RDMA}}),
            CATALOGS,
            "network/rdma-single-node",
            "warning",
            ["spec.network.rdma: TP8 PP1 DP1: a replica of 8 GPU(s) fits one H200 node", "Remove spec.network.rdma"],
        ),
        (
            multi_node({"socketInterface": "net1"}).env("NCCL_SOCKET_IFNAME", "eth0"),
            CATALOGS,
            "network/env-override",
            "warning",
            ["spec.engine.env[0].value: NCCL_SOCKET_IFNAME=eth0: overrides spec.network.socketInterface=net1"],
        ),
        (
            multi_node({"secondaryNetworks": ["ib-net"]}).set("spec.pod.annotations", {MULTUS_ANNOTATION: "other"}),
            CATALOGS,
            "network/secondary-networks",
            "error",
            [f'spec.pod.annotations["{MULTUS_ANNOTATION}"]: other: spec.network.secondaryNetworks renders', "remove"],
        ),
    ],
)
def test_each_network_finding_names_the_field_and_the_fix(
    builder: B, catalogs: Catalogs, rule: str, severity: str, fragments: list[str]
) -> None:
    found = [f for f in findings(builder.build(), catalogs) if f[0] == rule]
    assert len(found) == 1, found
    _, got_severity, message = found[0]
    assert got_severity == severity
    assert MESSAGE.match(message), message
    for fragment in fragments:
        assert fragment in message
    assert admit(builder.build(), catalogs).allowed is (severity == "warning")


@pytest.mark.parametrize(
    "builder, catalogs",
    [
        (multi_node(FULL), CATALOGS),
        (multi_node({"rdma": {}}), WITH_DEFAULT),
        (multi_node({"socketInterface": "net1"}).env("NCCL_SOCKET_IFNAME", "net1"), CATALOGS),
        (multi_node({}), CATALOGS),
        # Networks named by the annotation alone (no spec.network.secondaryNetworks) are the user's to choose.
        (multi_node({}).set("spec.pod.annotations", {MULTUS_ANNOTATION: "ib-net"}), CATALOGS),
    ],
)
def test_a_sound_network_spec_has_no_network_finding(builder: B, catalogs: Catalogs) -> None:
    assert findings(builder.build(), catalogs) == []


@pytest.mark.parametrize(
    "path, value",
    [
        ("spec.network.rdma.resourceName", "no-slash"),
        ("spec.network.rdma.resourceName", "Upper.Case/x"),
        ("spec.network.rdma.count", 0),
        ("spec.network.rdma.count", 17),
        ("spec.network.secondaryNetworks", ["Bad_Name"]),
        ("spec.network.secondaryNetworks", [f"n{i}" for i in range(9)]),
        ("spec.network.ibHCAs", "mlx5 0"),
        ("spec.network.socketInterface", "an-interface-name-too-long"),
        ("spec.network.ib_hcas", "mlx5_0"),
    ],
)
def test_malformed_network_fields_are_refused_by_the_schema(path: str, value: Any) -> None:
    result = admit(multi_node({}).set(path, value).build(), CATALOGS)
    assert not result.allowed
    assert [f.rule for f in result.errors] == ["schema"], result.rejection()
