"""The chart's values users expect of an operator chart, as `helm template` renders them and the schema checks them.

Pull secrets (own and global), the chart as a subchart, numbers where `--set` gives numbers, pod settings, the
image digest, name overrides, the log format, the aggregated ClusterRoles, the PodDisruptionBudget, and the
monitoring objects of two releases.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kopf.cli
import pytest
import yaml

from glm_operator.api.constants import OWNED_KINDS, OwnedKind
from glm_operator.render.alerts import ALERTS
from tests.support.chart import TEMPLATE_FLAGS
from tests.unit.test_alerts import CHART

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
MONITORING_ON = ("monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true")
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _template(helm: str, *sets: str, release: str = "glmops", chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    """`helm template` with --set values, exactly as a user types them (numbers stay numbers)."""
    args = [helm, "template", release, str(chart), "--namespace", "glmops-system", *TEMPLATE_FLAGS]
    for value in sets:
        args += ["--set", value]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _objects(helm: str, *sets: str, release: str = "glmops", chart: Path = CHART) -> dict[str, dict[str, Any]]:
    proc = _template(helm, *sets, release=release, chart=chart)
    assert proc.returncode == 0, proc.stderr
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(proc.stdout) if d}


def _refused(helm: str, *sets: str) -> str:
    proc = _template(helm, *sets)
    assert proc.returncode != 0, f"{sets} rendered"
    return proc.stderr


def _pod(objects: dict[str, dict[str, Any]], name: str = "glmops") -> dict[str, Any]:
    template: dict[str, Any] = objects[f"Deployment/{name}"]["spec"]["template"]
    return template


def _pod_specs(objects: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod spec the chart renders: the Deployment's and the helm test hook's."""
    specs = {k: o["spec"]["template"]["spec"] for k, o in objects.items() if o["kind"] == "Deployment"}
    specs |= {k: o["spec"] for k, o in objects.items() if o["kind"] == "Pod"}
    return specs


# --- imagePullSecrets and global ----------------------------------------------------------------------------------


def test_by_default_no_pod_names_a_pull_secret(helm: str) -> None:
    specs = _pod_specs(_objects(helm))
    assert set(specs) == {"Deployment/glmops", "Pod/glmops-test-webhook"}
    assert all("imagePullSecrets" not in spec for spec in specs.values())


def test_pull_secrets_reach_every_pod_global_first_and_each_name_once(helm: str) -> None:
    objects = _objects(
        helm,
        "global.imagePullSecrets[0].name=shared",
        "global.imagePullSecrets[1].name=own",
        "imagePullSecrets[0].name=own",
        "imagePullSecrets[1].name=mirror",
    )
    for where, spec in _pod_specs(objects).items():
        assert spec["imagePullSecrets"] == [{"name": "shared"}, {"name": "own"}, {"name": "mirror"}], where


@pytest.mark.parametrize(
    "value", ["imagePullSecrets[0]=regcred", "imagePullSecrets[0].nam=regcred", "imagePullSecrets=x"]
)
def test_the_schema_refuses_a_pull_secret_that_is_not_a_name(helm: str, value: str) -> None:
    assert "imagePullSecrets" in _refused(helm, value)


def test_global_values_of_a_parent_are_accepted(helm: str) -> None:
    assert SCHEMA["properties"]["global"]["additionalProperties"] is True
    assert "Deployment/glmops" in _objects(helm, "global.foo=bar", "global.registry.host=r.example")


def test_as_a_subchart_it_renders_with_the_parents_globals_and_pull_secrets(helm: str, tmp_path: Path) -> None:
    parent = tmp_path / "platform"
    parent.mkdir()
    dependency = {"name": "glmops", "version": CHART_META["version"], "repository": f"file://{CHART}"}
    chart = {"apiVersion": "v2", "name": "platform", "version": "1.0.0", "dependencies": [dependency]}
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    helm_home = {f"HELM_{kind}_HOME": str(tmp_path / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
    build = subprocess.run(
        [helm, "dependency", "build", str(parent)],
        capture_output=True, text=True, timeout=120, env=os.environ | helm_home,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    objects = _objects(
        helm,
        "global.foo=bar",
        "global.imagePullSecrets[0].name=platform-pull",
        "glmops.imagePullSecrets[0].name=glmops-pull",
        release="platform",
        chart=parent,
    )
    spec = _pod(objects, "platform-glmops")["spec"]
    assert spec["imagePullSecrets"] == [{"name": "platform-pull"}, {"name": "glmops-pull"}]


# --- image and names ---------------------------------------------------------------------------------------------


def test_a_digest_replaces_the_tag_in_every_pod(helm: str) -> None:
    digest = "sha256:" + "ab" * 32
    objects = _objects(helm, "image.tag=9.9.9", f"image.digest={digest}")
    for where, spec in _pod_specs(objects).items():
        assert spec["containers"][0]["image"] == f"ghcr.io/glmops/operator@{digest}", where
    assert "digest" in _refused(helm, "image.digest=latest")


def test_without_a_digest_the_tag_defaults_to_the_app_version(helm: str) -> None:
    image = _pod(_objects(helm))["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/glmops/operator:{CHART_META['appVersion']}"


def test_fullname_override_names_every_object_and_keeps_the_release_label(helm: str) -> None:
    objects = _objects(helm, "fullnameOverride=ops", *MONITORING_ON)
    names = {key.split("/", 1)[1] for key in objects}
    assert {"ops", "ops-webhook", "ops-metrics", "ops-glmops-system"} <= names
    peering = {"ClusterKopfPeering/glmops"}  # the kopf peering's name is the operator's --peering, not the release's
    assert not {k for k in objects.keys() - peering if k.split("/", 1)[1].startswith("glmops")}
    assert objects["Deployment/ops"]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    assert objects["Deployment/ops"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "glmops"


def test_name_override_renames_the_name_label_and_the_full_name(helm: str) -> None:
    objects = _objects(helm, "nameOverride=llm-operator", release="team")
    deployment = objects["Deployment/team-llm-operator"]
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "llm-operator"
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "llm-operator"


def test_a_full_name_that_is_no_dns_label_is_refused(helm: str) -> None:
    assert "fullnameOverride" in _refused(helm, "fullnameOverride=Ops_1")


# --- numbers where --set gives numbers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, field, expected",
    [
        ("resources.requests.cpu=1", ("requests", "cpu"), 1),
        ("resources.requests.memory=1073741824", ("requests", "memory"), 1073741824),
        ("resources.limits.cpu=2", ("limits", "cpu"), 2),
        ("resources.limits.memory=1Gi", ("limits", "memory"), "1Gi"),
        ("resources.requests.ephemeral-storage=1Gi", ("requests", "ephemeral-storage"), "1Gi"),
        ("resources.requests.cpu=0.5", ("requests", "cpu"), "0.5"),
    ],
)
def test_a_resource_quantity_may_be_a_number_or_a_string(
    helm: str, value: str, field: tuple[str, str], expected: Any
) -> None:
    resources = _pod(_objects(helm, value))["spec"]["containers"][0]["resources"]
    assert resources[field[0]][field[1]] == expected


@pytest.mark.parametrize(
    "value", ["resources.requests.cpu=1 core", "resources.limits.memory=512MB", "resources.request.cpu=1"]
)
def test_the_schema_refuses_what_is_no_quantity_and_misspelt_resource_keys(helm: str, value: str) -> None:
    assert "resources" in _refused(helm, value)


def test_a_numeric_image_tag_is_taken_as_its_text(helm: str) -> None:
    assert _pod(_objects(helm, "image.tag=2"))["spec"]["containers"][0]["image"] == "ghcr.io/glmops/operator:2"


@pytest.mark.parametrize("value, expected", [("0.1", "0.1"), ("1", "1")])
def test_an_alert_threshold_given_with_set_reaches_the_rule(helm: str, value: str, expected: str) -> None:
    key = "monitoring.prometheusRule.alerts.GLMOpsNullContentHigh.maxRate"
    rule = _objects(helm, *MONITORING_ON, f"{key}={value}")["PrometheusRule/glmops"]
    null = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "GLMOpsNullContentHigh")
    assert f":ratio_rate > {expected}\n" in null["expr"]


def test_an_alert_threshold_that_is_no_number_is_refused(helm: str) -> None:
    assert "maxRate" in _refused(helm, "monitoring.prometheusRule.alerts.GLMOpsNullContentHigh.maxRate=5%")


# --- the operator pod -----------------------------------------------------------------------------------------------


def test_pod_labels_and_annotations_are_strings_on_the_pod_and_the_selector_stays(helm: str) -> None:
    objects = _objects(
        helm, "podLabels.team=serving", "podLabels.cost-center=1234", "podAnnotations.example\\.com/scrape=true"
    )
    deployment = objects["Deployment/glmops"]
    meta = deployment["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "serving" and meta["labels"]["cost-center"] == "1234"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()
    assert meta["annotations"] == {"example.com/scrape": "true"}
    assert "team" not in deployment["metadata"]["labels"], "pod labels are the pod's, not the Deployment's"


def test_a_pod_label_may_not_replace_a_selector_label(helm: str) -> None:
    assert "podLabels.app.kubernetes.io/instance" in _refused(helm, "podLabels.app\\.kubernetes\\.io/instance=x")


def test_priority_class_and_extra_env_reach_the_pod(helm: str) -> None:
    spec = _pod(
        _objects(
            helm,
            "priorityClassName=system-cluster-critical",
            "extraEnv[0].name=HTTPS_PROXY",
            "extraEnv[0].value=http://proxy:3128",
            "extraEnv[1].name=NODE",
            "extraEnv[1].valueFrom.fieldRef.fieldPath=spec.nodeName",
        )
    )["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    env = spec["containers"][0]["env"]
    assert env[-2:] == [
        {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    assert "GLMOPS_LOG_LEVEL" in {e["name"] for e in env}, "the chart's own stay"


def test_extra_env_without_a_name_is_refused(helm: str) -> None:
    assert "extraEnv" in _refused(helm, "extraEnv[0].value=x")


def test_topology_spread_selects_the_operators_pods_unless_given_a_selector(helm: str) -> None:
    spread = "topologySpreadConstraints[{i}].{key}={value}"
    sets = [
        spread.format(i=i, key=key, value=value)
        for i, zone in enumerate(("topology.kubernetes.io/zone", "kubernetes.io/hostname"))
        for key, value in (("maxSkew", 1), ("topologyKey", zone), ("whenUnsatisfiable", "ScheduleAnyway"))
    ]
    pod = _pod(_objects(helm, *sets, "topologySpreadConstraints[1].labelSelector.matchLabels.tier=ops"))
    first, second = pod["spec"]["topologySpreadConstraints"]
    assert first["topologyKey"] == "topology.kubernetes.io/zone" and first["maxSkew"] == 1
    assert first["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert second["labelSelector"] == {"matchLabels": {"tier": "ops"}}


def test_by_default_the_pod_has_no_extra_settings(helm: str) -> None:
    pod = _pod(_objects(helm))
    assert "annotations" not in pod["metadata"]
    for key in ("priorityClassName", "topologySpreadConstraints", "imagePullSecrets"):
        assert key not in pod["spec"]


# --- log format -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_format", SCHEMA["properties"]["logFormat"]["enum"])
def test_each_log_format_reaches_kopf_run_which_accepts_it(helm: str, log_format: str) -> None:
    args = _pod(_objects(helm, f"logFormat={log_format}"))["spec"]["containers"][0]["args"]
    assert args[0] == "run" and f"--log-format={log_format}" in args
    context = kopf.cli.run.make_context("run", args[1:])
    assert context.params["log_format"].name.lower() == log_format


def test_the_default_log_format_is_kopfs_own_and_an_unknown_one_is_refused(helm: str) -> None:
    args = _pod(_objects(helm))["spec"]["containers"][0]["args"]
    default = next(p for p in kopf.cli.run.params if p.name == "log_format").default
    assert f"--log-format={default}" in args
    assert "logFormat" in _refused(helm, "logFormat=xml")


# --- aggregated ClusterRoles ----------------------------------------------------------------------------------------


def _aggregated(objects: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        k: o
        for k, o in objects.items()
        if o["kind"] == "ClusterRole" and any(label.startswith(AGGREGATE) for label in o["metadata"]["labels"])
    }


def _grants(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


def test_view_reads_glmops_objects_and_is_aggregated_into_view_edit_and_admin(helm: str) -> None:
    view = _aggregated(_objects(helm))["ClusterRole/glmops-view"]
    assert {f"{AGGREGATE}{role}" for role in ("view", "edit", "admin")} <= view["metadata"]["labels"].keys()
    reads = {"get", "list", "watch"}
    for resource in ("glmdeployments", "glmdeployments/status", "glmimages"):
        assert {(resource, verb) for verb in reads} <= _grants(view), resource
    assert {verb for _, verb in _grants(view)} == reads


def test_edit_writes_glmdeployments_only_and_is_aggregated_into_edit_and_admin(helm: str) -> None:
    edit = _aggregated(_objects(helm))["ClusterRole/glmops-edit"]
    labels = {k for k in edit["metadata"]["labels"] if k.startswith(AGGREGATE)}
    assert labels == {f"{AGGREGATE}edit", f"{AGGREGATE}admin"}, "never into view"
    assert _grants(edit) == {("glmdeployments", verb) for verb in ("create", "update", "patch", "delete")}
    assert all(rule["apiGroups"] == ["glmops.dev"] for rule in edit["rules"])


def test_aggregated_cluster_roles_can_be_switched_off(helm: str) -> None:
    objects = _objects(helm, "rbac.aggregateClusterRoles=false")
    assert not _aggregated(objects)
    assert "ClusterRole/glmops" in objects, "the operator's own role stays"


# --- PodDisruptionBudget --------------------------------------------------------------------------------------------


def _budget(helm: str, *sets: str) -> dict[str, Any] | None:
    return _objects(helm, *sets).get("PodDisruptionBudget/glmops")


def test_one_replica_gets_no_budget_and_two_get_one_pod_at_a_time(helm: str) -> None:
    assert _budget(helm, "replicas=1") is None
    assert _budget(helm, "replicas=1", "podDisruptionBudget.minAvailable=1") is None, "it would block every drain"
    budget = _budget(helm)
    assert budget is not None and budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
    deployment = _objects(helm)["Deployment/glmops"]
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_two_replicas_by_default_each_preferring_a_node_of_its_own(helm: str) -> None:
    deployment = _objects(helm)["Deployment/glmops"]
    assert deployment["spec"]["replicas"] == 2
    preferred = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname"
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        ("podDisruptionBudget.minAvailable=2", {"minAvailable": 2}),
        ("podDisruptionBudget.minAvailable=50%", {"minAvailable": "50%"}),
        ("podDisruptionBudget.maxUnavailable=2", {"maxUnavailable": 2}),
        ("podDisruptionBudget.maxUnavailable=34%", {"maxUnavailable": "34%"}),
        ("podDisruptionBudget.minAvailable=0", {"minAvailable": 0}),
        # --set KEY=null removes the key: the default bound, never the text "<nil>".
        ("podDisruptionBudget.minAvailable=null", {"maxUnavailable": 1}),
        ("podDisruptionBudget.maxUnavailable=null", {"maxUnavailable": 1}),
    ],
)
def test_the_budget_takes_min_available_or_max_unavailable(helm: str, value: str, expected: dict[str, Any]) -> None:
    budget = _budget(helm, "replicas=3", value)
    assert budget is not None
    assert {k: v for k, v in budget["spec"].items() if k != "selector"} == expected


def test_the_budget_can_be_switched_off_and_refuses_both_bounds_or_a_bad_one(helm: str) -> None:
    assert _budget(helm, "replicas=3", "podDisruptionBudget.enabled=false") is None
    both = _refused(helm, "replicas=3", "podDisruptionBudget.minAvailable=1", "podDisruptionBudget.maxUnavailable=1")
    assert "not both" in both
    assert "maxUnavailable" in _refused(helm, "replicas=3", "podDisruptionBudget.maxUnavailable=one")


# --- monitoring -------------------------------------------------------------------------------------------------------


def test_additional_rule_labels_and_annotations_reach_every_alert_as_strings(helm: str) -> None:
    rule = _objects(
        helm,
        *MONITORING_ON,
        "monitoring.prometheusRule.additionalRuleLabels.team=inference",
        "monitoring.prometheusRule.additionalRuleLabels.tier=1",
        "monitoring.prometheusRule.additionalRuleLabels.severity=info",
        "monitoring.prometheusRule.additionalRuleAnnotations.dashboard=https://grafana.example/d/glmops",
        "monitoring.prometheusRule.additionalRuleAnnotations.runbook_url=https://elsewhere.example",
    )["PrometheusRule/glmops"]
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert set(rules) == {a.name for a in ALERTS}
    alerts = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["prometheusRule"]["alerts"]
    for name, r in rules.items():
        assert r["labels"] == {"severity": alerts[name]["severity"], "team": "inference", "tier": "1"}, name
        assert r["annotations"]["dashboard"] == "https://grafana.example/d/glmops"
        assert r["annotations"]["runbook_url"].endswith(f"#{name.lower()}"), "the rule's own runbook stays"


def _operator_job(objects: dict[str, dict[str, Any]], fullname: str) -> tuple[str, str]:
    """The job the release's ServiceMonitor gives the operator's targets, and the expression of its down alert."""
    relabel = objects[f"ServiceMonitor/{fullname}"]["spec"]["endpoints"][0]["relabelings"]
    job: str = next(r["replacement"] for r in relabel if r.get("targetLabel") == "job")
    rules = objects[f"PrometheusRule/{fullname}"]["spec"]["groups"]
    down: str = next(r["expr"] for g in rules for r in g["rules"] if r.get("alert") == "GLMOpsOperatorDown")
    return job, down


def test_two_releases_scrape_and_watch_their_own_operator_job(helm: str) -> None:
    jobs = {}
    for release, fullname in (("glmops", "glmops"), ("canary", "canary-glmops")):
        objects = _objects(helm, *MONITORING_ON, release=release)
        job, down = _operator_job(objects, fullname)
        assert down == f'absent(up{{job="{job}"}} == 1)\n'
        vllm = objects[f"PodMonitor/{fullname}-vllm"]["spec"]["podMetricsEndpoints"][0]["relabelings"]
        assert {"targetLabel": "job", "replacement": f"{fullname}-vllm"} in vllm
        jobs[release] = job
    assert jobs == {"glmops": "glmops-operator", "canary": "canary-glmops-operator"}


def test_the_operator_job_follows_a_full_name_override(helm: str) -> None:
    job, down = _operator_job(_objects(helm, *MONITORING_ON, "fullnameOverride=ops"), "ops")
    assert job == "ops-operator" and 'job="ops-operator"' in down


def _operator_env_of(objects: dict[str, dict[str, Any]]) -> dict[str, str]:
    container = _pod(objects)["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_vllm_images_registry_reaches_the_operator_and_is_left_out_when_empty(helm: str) -> None:
    env = _operator_env_of(_objects(helm, "vllmImages.registry=registry.example.com/glmops"))
    assert env["GLMOPS_VLLM_IMAGE_REGISTRY"] == "registry.example.com/glmops"
    assert "GLMOPS_VLLM_IMAGE_REGISTRY" not in _operator_env_of(_objects(helm))


def test_vllm_images_registry_equal_to_the_build_registry_renders_and_a_different_one_is_refused(helm: str) -> None:
    build = ("imageBuild.enabled=true", "imageBuild.registry=registry.example.com/glmops")
    env = _operator_env_of(_objects(helm, *build, "vllmImages.registry=registry.example.com/glmops"))
    assert env["GLMOPS_IMAGE_BUILD_REGISTRY"] == "registry.example.com/glmops"
    message = _refused(helm, *build, "vllmImages.registry=registry.example.com/other")
    assert "vllmImages.registry (registry.example.com/other) differs from imageBuild.registry" in message


@pytest.mark.parametrize("registry", ["https://registry.example.com", "Registry.example.com/x", "a b"])
def test_vllm_images_registry_that_is_not_a_registry_path_is_refused_by_the_schema(helm: str, registry: str) -> None:
    assert "/vllmImages/registry" in _refused(helm, f"vllmImages.registry={registry}")


def _template_without_api_versions(helm: str, *sets: str) -> subprocess.CompletedProcess[str]:
    """`helm template` as a user first types it: without telling it what the cluster serves."""
    args = [helm, "template", "glmops", str(CHART), "--namespace", "glmops-system"]
    for value in sets:
        args += ["--set", value]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_write_policy_is_rendered_with_its_binding_where_the_cluster_serves_it(helm: str) -> None:
    objects = _objects(helm)
    assert {
        "ValidatingAdmissionPolicy/glmops-operator-writes",
        "ValidatingAdmissionPolicyBinding/glmops-operator-writes",
    } <= set(objects)


def test_without_the_policy_served_the_chart_refuses_and_says_what_to_pass_or_set(helm: str) -> None:
    proc = _template_without_api_versions(helm)
    assert proc.returncode != 0
    assert "--api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" in proc.stderr
    assert "rbac.writePolicy=off" in proc.stderr


def test_write_policy_off_installs_without_the_policy_and_the_schema_takes_no_other_mode(helm: str) -> None:
    proc = _template_without_api_versions(helm, "rbac.writePolicy=off")
    assert proc.returncode == 0, proc.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d}
    assert "Deployment" in kinds and not {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} & kinds
    assert "ValidatingAdmissionPolicy" not in {o["kind"] for o in _objects(helm, "rbac.writePolicy=off").values()}
    assert "/rbac/writePolicy" in _refused(helm, "rbac.writePolicy=auto")


# --- what GLMDeployments may ask of the operator ----------------------------------------------------------------------


def _access_policy(objects: dict[str, dict[str, Any]]) -> Any:
    from glm_operator.catalog.access_policy import ENV, AccessPolicy

    container = _pod(objects)["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    return AccessPolicy.from_env({ENV: env[ENV]})


def test_the_chart_passes_the_access_policy_whose_defaults_are_the_operators(helm: str) -> None:
    from glm_operator.catalog.access_policy import AccessPolicy

    assert _access_policy(_objects(helm)) == AccessPolicy()


def test_an_administrator_extends_the_access_policy_through_values(helm: str) -> None:
    policy = _access_policy(
        _objects(
            helm,
            "podPolicy.volumeTypes={configMap,hostPath}",
            "podPolicy.serviceAccounts={workload-identity}",
            "canaryData.allowedUrls={https://data.example.com/gsm8k/}",
        )
    )
    assert policy.volume_types == {"configMap", "hostPath"} and policy.service_accounts == ("workload-identity",)
    assert policy.allows_url("https://data.example.com/gsm8k/test.jsonl")


def test_the_operator_may_ask_subject_access_reviews_and_nothing_more_of_authorization(helm: str) -> None:
    rules = _objects(helm)["ClusterRole/glmops"]["rules"]
    authz = [r for r in rules if "authorization.k8s.io" in r["apiGroups"]]
    review = {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
    assert authz == [review]
    without_webhook = _objects(helm, "webhook.enabled=false")["ClusterRole/glmops"]["rules"]
    assert not [r for r in without_webhook if "authorization.k8s.io" in r["apiGroups"]], "nothing asks without it"


def _operator_rules(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules of every role the chart binds to the operator's ServiceAccount."""
    account = next(o["metadata"]["name"] for o in objects.values() if o["kind"] == "ServiceAccount")
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objects.values()
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in b.get("subjects") or [])
    }
    return [r for o in objects.values() if (o["kind"], o["metadata"]["name"]) in bound for r in o.get("rules") or []]


@pytest.mark.parametrize("owned", OWNED_KINDS, ids=lambda k: k.kind)
@pytest.mark.parametrize("sets", [(), ("watchNamespaces={team-a}",)], ids=["all-namespaces", "one-namespace"])
def test_the_chart_grants_the_operator_every_kind_a_glmdeployment_owns(
    helm: str, owned: OwnedKind, sets: tuple[str, ...]
) -> None:
    rules = _operator_rules(_objects(helm, *sets))
    granted = {
        verb
        for r in rules
        if owned.group in r.get("apiGroups", []) and owned.plural in r.get("resources", [])
        for verb in r.get("verbs", [])
    }
    needed = {"list", "watch", "create", "patch", "delete"}
    assert needed <= granted, (
        f"{owned.kind}: the operator owns it (api/constants.py OWNED_KINDS) but the chart grants only "
        f"{sorted(granted)}: add {sorted(needed - granted)} in charts/glmops/templates/_rbac.tpl"
    )
