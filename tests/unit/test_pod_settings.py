"""spec.pod: merged into every pod glmops renders, and refused where it would undo what glmops decided."""

from __future__ import annotations

import re
from typing import Any

import pytest

from glm_operator.api import GLMDeployment
from glm_operator.api.pod import GLMOPS_MOUNT_PATHS, GLMOPS_VOLUMES, parse_quantity, qualified_name_problem
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.plan import build_plan
from glm_operator.render.workloads import render_objects
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()
OWNER = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "name": "glm", "uid": "uid-1"}
H200_EXPR = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}


def with_pod(pod: dict[str, Any], builder: B | None = None) -> dict[str, Any]:
    return (builder or B().tensor(8)).namespace("ns").set("spec.pod", pod).build()


def templates(obj: dict[str, Any], lws: bool = True) -> list[dict[str, Any]]:
    """Every pod template rendered for `obj` (Deployment, LeaderWorkerSet leader and worker, StatefulSets)."""
    result = admit(obj, CATALOGS)
    assert result.allowed, result.rejection()
    glmd = GLMDeployment.model_validate(result.patched)
    out = []
    for o in render_objects(build_plan(glmd, CATALOGS), glmd, OWNER, lws):
        if o["kind"] in ("Deployment", "StatefulSet"):
            out.append(o["spec"]["template"])
        elif o["kind"] == "LeaderWorkerSet":
            lwt = o["spec"]["leaderWorkerTemplate"]
            out += [lwt["leaderTemplate"], lwt["workerTemplate"]]
    assert out
    return out


def vllm(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = template["spec"]["containers"][0]
    assert container["name"] == "vllm"
    return container


SINGLE = B().tensor(8)
MULTI = B().tensor(8).pipeline(2)
SHAPES = [(SINGLE, True), (MULTI, True), (MULTI, False)]
SHAPE_IDS = ["deployment", "leaderworkerset", "statefulsets"]

EVERYTHING = {
    "resources": {"requests": {"cpu": 32, "memory": "512Gi"}, "limits": {"memory": "1Ti"}},
    "nodeSelector": {"pool.example.com/name": "glm"},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]}}
            ],
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    },
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "glm", "effect": "NoSchedule"}],
    "imagePullSecrets": [{"name": "registry-creds"}],
    "serviceAccountName": "glm-serving",
    "priorityClassName": "glm-inference",
    "labels": {"example.com/team": "ml"},
    "annotations": {"sidecar.istio.io/inject": "false"},
    "volumes": [{"name": "tls", "secret": {"secretName": "tls"}}],
    "volumeMounts": [{"name": "tls", "mountPath": "/etc/tls", "readOnly": True}],
    "shmSize": "128Gi",
}


@pytest.mark.parametrize("builder, lws", SHAPES, ids=SHAPE_IDS)
def test_every_rendered_pod_carries_every_pod_setting(builder: B, lws: bool) -> None:
    for template in templates(with_pod(EVERYTHING, builder), lws):
        spec, meta, container = template["spec"], template["metadata"], vllm(template)
        assert container["resources"]["requests"] == {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"}
        assert container["resources"]["limits"] == {"memory": "1Ti", "nvidia.com/gpu": "8"}
        assert spec["nodeSelector"] == {"pool.example.com/name": "glm"}
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "glm", "effect": "NoSchedule"},
        ]
        assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
        assert (spec["serviceAccountName"], spec["priorityClassName"]) == ("glm-serving", "glm-inference")
        assert meta["labels"]["example.com/team"] == "ml"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "glmops"
        assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
        assert "glmops.dev/command-hash" in meta["annotations"]
        assert {"name": "tls", "secret": {"secretName": "tls"}} in spec["volumes"]
        assert {"name": "tls", "mountPath": "/etc/tls", "readOnly": True} in container["volumeMounts"]
        shm = next(v for v in spec["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}
        assert spec["affinity"]["podAntiAffinity"] == {"preferredDuringSchedulingIgnoredDuringExecution": []}


def test_each_required_node_term_of_the_user_is_anded_with_the_accelerators_expressions() -> None:
    (template,) = templates(with_pod(EVERYTHING))
    node = template["spec"]["affinity"]["nodeAffinity"]
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, H200_EXPR]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}, H200_EXPR]},
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 10


@pytest.mark.parametrize(
    "pod, path, expected",
    [
        ({}, "spec.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [H200_EXPR]}]}}}),
        ({}, "spec.tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        ({}, "spec.volumes[0].emptyDir.sizeLimit", "64Gi"),
        ({"shmSize": "256Gi"}, "spec.volumes[0].emptyDir.sizeLimit", "256Gi"),
        ({"affinity": {"podAffinity": {"x": 1}}}, "spec.affinity.nodeAffinity", {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [H200_EXPR]}]}}),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
         [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
           "matchExpressions": [H200_EXPR]}]),
        ({"resources": {"requests": {"cpu": "500m"}}}, "spec.containers[0].resources.limits", {"nvidia.com/gpu": "8"}),
    ],
    ids=["no-settings-affinity", "no-settings-tolerations", "default-shm", "shm-size", "pod-affinity-only",
         "match-fields-term", "request-without-limit"],
)  # fmt: skip
def test_rendering_table(pod: dict[str, Any], path: str, expected: Any) -> None:
    (template,) = templates(with_pod(pod))
    node: Any = template
    for part in path.split("."):
        key, _, index = part.partition("[")
        node = node[key]
        if index:
            node = node[int(index.rstrip("]"))]
    assert node == expected


def test_no_pod_settings_render_no_new_pod_fields() -> None:
    (template,) = templates(with_pod({}))
    assert not {"nodeSelector", "imagePullSecrets", "serviceAccountName", "priorityClassName"} & set(template["spec"])


def test_the_reserved_volume_names_and_paths_are_every_one_glmops_renders() -> None:
    for builder, lws in SHAPES:
        for template in templates(with_pod({}, builder), lws):
            assert {v["name"] for v in template["spec"]["volumes"]} == set(GLMOPS_VOLUMES)
            assert {m["mountPath"] for m in vllm(template)["volumeMounts"]} == set(GLMOPS_MOUNT_PATHS)


# --- Refusals ---------------------------------------------------------------------------------------------------

TERMS = "spec.pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
MESSAGE = re.compile(r"^(?P<field>\S+): (?P<value>.+?): (?P<problem>.+) \(rule (?P<rule>[^,)]+)\)\. (?P<fix>.+)\.$")


@pytest.mark.parametrize(
    "pod, field, problem, fix",
    [
        ({"resources": {"limits": {"nvidia.com/gpu": 4}}}, 'spec.pod.resources.limits["nvidia.com/gpu"]',
         "GPU count glmops computes", "spec.parallelism"),
        ({"resources": {"requests": {"amd.com/gpu": "8"}}}, 'spec.pod.resources.requests["amd.com/gpu"]',
         "GPU count glmops computes", "spec.parallelism"),
        ({"resources": {"requests": {"memory": "2Ti"}, "limits": {"memory": "1Ti"}}},
         'spec.pod.resources.requests["memory"]', "above its limit 1Ti", "Lower the request"),
        ({"resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": 1}}},
         'spec.pod.resources.requests["cpu"]', "above its limit 1", "Lower the request"),
        ({"resources": {"requests": {"bad-": "1"}}}, 'spec.pod.resources.requests["bad-"]',
         "not a resource name", "cpu or memory"),
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
         'spec.pod.nodeSelector["nvidia.com/gpu.product"]', "no GPU node would match", "NVIDIA-H200"),
        ({"nodeSelector": {"-bad": "x"}}, 'spec.pod.nodeSelector["-bad"]', "not a label key", "node label"),
        ({"labels": {"glmops.dev/serving": "true"}}, 'spec.pod.labels["glmops.dev/serving"]',
         "glmops (or the workload controller) sets this key", "your own prefix"),
        ({"labels": {"app.kubernetes.io/instance": "other"}}, 'spec.pod.labels["app.kubernetes.io/instance"]',
         "selects or tracks pods by it", "your own prefix"),
        ({"labels": {"app.kubernetes.io/managed-by": "me"}}, 'spec.pod.labels["app.kubernetes.io/managed-by"]',
         "sets this key", "Remove it"),
        ({"labels": {"Bad_Prefix.com/x": "y"}}, 'spec.pod.labels["Bad_Prefix.com/x"]',
         "prefix before '/' must be a DNS subdomain", "example.com/team"),
        ({"labels": {"a" * 64: "y"}}, f'spec.pod.labels["{"a" * 64}"]', "1 to 63 characters", "example.com"),
        ({"annotations": {"glmops.dev/command-hash": "x"}}, 'spec.pod.annotations["glmops.dev/command-hash"]',
         "sets this key", "your own prefix"),
        ({"annotations": {"/x": "y"}}, 'spec.pod.annotations["/x"]', "prefix before '/' is empty", "example.com"),
        ({"volumes": [{"name": "shm", "emptyDir": {}}]}, "spec.pod.volumes[0].name", "glmops renders a volume",
         "another name"),
        ({"volumes": [{"name": "model-cache", "emptyDir": {}}]}, "spec.pod.volumes[0].name",
         "glmops renders a volume", "another name"),
        ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "y", "mountPath": "/y"}]},
         "spec.pod.volumeMounts[0].name", "names no volume in spec.pod.volumes", "Declare a volume named y"),
        ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}]},
         "spec.pod.volumeMounts[0].mountPath", "glmops mounts /dev/shm", "spec.pod.shmSize"),
        ({"volumes": [{"name": "x", "emptyDir": {}}],
          "volumeMounts": [{"name": "x", "mountPath": "/root/.cache/huggingface/hub/"}]},
         "spec.pod.volumeMounts[0].mountPath", "glmops mounts /root/.cache/huggingface", "Mount it elsewhere"),
        ({"volumes": [{"name": "x", "emptyDir": {}}],
          "volumeMounts": [{"name": "x", "mountPath": "/data", "subPath": "a/../../etc"}]},
         "spec.pod.volumeMounts[0].subPath", "must not contain '..'", "inside it"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-B200"]}]},
        ]}}}}, f"{TERMS}[1]", "this term matches no GPU node", "spec.accelerator.type picks the GPU model"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-H200"]}]},
        ]}}}}, f"{TERMS}[0]", "H200 nodes carry nvidia.com/gpu.product in NVIDIA-H200", "Remove that expression"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}, "spec.pod.tolerations[0].value",
         "must be empty with operator Exists", "Remove it"),
        ({"tolerations": [{"operator": "Equal", "value": "b"}]}, "spec.pod.tolerations[0].key",
         "only with operator Exists", "operator: Exists"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]},
         "spec.pod.tolerations[0].tolerationSeconds", "only to effect NoExecute", "effect: NoExecute"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("spec.") else None,
)  # fmt: skip
def test_a_setting_that_would_undo_glmops_is_refused_naming_the_field_and_the_fix(
    pod: dict[str, Any], field: str, problem: str, fix: str
) -> None:
    result = admit(with_pod(pod), CATALOGS)
    assert not result.allowed
    matches = [MESSAGE.match(f.message) for f in result.errors]
    assert all(matches), [f.message for f in result.errors]
    hit = [m for m in matches if m and m["field"] == field]
    assert hit, [f.message for f in result.errors]
    assert problem in hit[0]["problem"] and fix in hit[0]["fix"], hit[0].string
    assert hit[0]["rule"].startswith("pod/")


@pytest.mark.parametrize(
    "pod, field, words",
    [
        ({"resources": {"requests": {"memory": "lots"}}}, "spec.pod.resources.requests.memory", "must match"),
        ({"resources": {"requests": {"memory": True}}}, "spec.pod.resources.requests.memory", "integer or a string"),
        ({"labels": {"a": "not a value"}}, "spec.pod.labels.a", "must match"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "spec.pod.labels", "at most 64 entries"),
        ({"serviceAccountName": "Not_DNS"}, "spec.pod.serviceAccountName", "must match"),
        ({"priorityClassName": "UPPER"}, "spec.pod.priorityClassName", "must match"),
        ({"tolerations": [{"operator": "Lt"}]}, "spec.pod.tolerations[0].operator", "must be one of"),
        ({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "secret": {}}]}, "spec.pod.volumes[1]",
         "duplicate entry (name=a)"),
        ({"volumes": [{"emptyDir": {}}]}, "spec.pod.volumes[0].name", "required field is missing"),
        ({"volumeMounts": [{"name": "a", "mountPath": "relative"}]}, "spec.pod.volumeMounts[0].mountPath",
         "must match"),
        ({"shmSize": "huge"}, "spec.pod.shmSize", "must match"),
        ({"affinity": {"nodeAffinity": "zone-a"}}, "spec.pod.affinity.nodeAffinity", "must be of type object"),
        ({"affinity": {"nodeAfinity": {}}}, "spec.pod.affinity.nodeAfinity", "unknown field"),
        ({"imagePullSecrets": ["creds"]}, "spec.pod.imagePullSecrets[0]", "must be of type object"),
    ],
)  # fmt: skip
def test_the_schema_refuses_malformed_pod_settings_before_the_rules(
    pod: dict[str, Any], field: str, words: str
) -> None:
    result = admit(with_pod(pod), CATALOGS)
    assert not result.allowed
    assert any(f.field == field and words in f.problem and f.rule == "schema" for f in result.errors), [
        f.message for f in result.errors
    ]


@pytest.mark.parametrize(
    "pod",
    [
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}},  # a value the accelerator allows narrows
        {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}},
        {"labels": {"example.com/team": "ml", "team": ""}, "annotations": {"prometheus.io/scrape": "true"}},
        {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
         "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "x/y"},
                          {"name": "data", "mountPath": "/dev/shmem"}]},
        {"tolerations": [{"operator": "Exists"}]},
        {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                   "values": ["NVIDIA-H200", "NVIDIA-B200"]}]}]}}}},
    ],
)  # fmt: skip
def test_settings_that_only_add_are_admitted(pod: dict[str, Any]) -> None:
    result = admit(with_pod(pod), CATALOGS)
    assert result.allowed, result.rejection()


@pytest.mark.parametrize(
    "text, value",
    [("64Gi", 64 * 2**30), ("500m", 0.5), ("1", 1), ("1.5k", 1500), ("2e3", 2000), (4, 4), ("1Ti", 2**40)],
)
def test_quantities_parse_as_kubernetes_reads_them(text: int | str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "Gi", "1GB", "1.2.3", "-"])
def test_a_malformed_quantity_is_none(text: str) -> None:
    assert parse_quantity(text) is None


@pytest.mark.parametrize(
    "key, ok",
    [("team", True), ("example.com/team", True), ("a.b-c_d", True), ("-x", False), ("x/", False),
     ("Example.com/x", False), ("a/b/c", False), ("a" * 63, True), ("a" * 64, False)],
)  # fmt: skip
def test_qualified_names_follow_kubernetes(key: str, ok: bool) -> None:
    assert (qualified_name_problem(key) is None) is ok
