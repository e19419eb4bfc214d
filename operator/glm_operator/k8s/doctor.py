"""What `glmctl doctor` reads from a cluster: one bounded pass of GETs, LISTs, a dry run and SubjectAccessReviews.

Every request has a timeout; lists are paginated and capped (`MAX_NODES`, `MAX_LISTED`), so a large cluster costs
a bounded time. Nothing is written: the GLMDeployment probe is sent with `dryRun=All`. Secrets are read for their
key names (the webhook certificate) or Helm's release record, and their values never leave this module. The
decisions are `glm_operator.doctor`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.catalog import AcceleratorCatalog
from glm_operator.doctor.checks import GLMOPS_CRDS, LWS_CRD, MONITORING_CRDS
from glm_operator.doctor.facts import (
    AccessFact,
    CRDFact,
    DeploymentFact,
    DryRunFact,
    NodeFact,
    Options,
    Permission,
    ReleaseFact,
    SecretFact,
    Snapshot,
    StorageClassFact,
    WebhookConfigFact,
    WebhookFact,
)
from glm_operator.doctor.probe import names_a_rule, nodes_per_replica, probe_namespace, probe_object
from glm_operator.doctor.release import (
    ReleaseRecordError,
    decode_release,
    granted_permissions,
    manifest_objects,
    release_fact,
)
from glm_operator.doctor.webhooks import CERT_MANAGER_CRDS
from glm_operator.k8s.client import API_UNREACHABLE, refusal

TIMEOUT = (5.0, 20.0)  # connect, read: seconds per request
PAGE = 500
MAX_NODES = 5000
MAX_LISTED = 5000  # GLMDeployments, StorageClasses
MAX_PERMISSIONS = 400  # SubjectAccessReviews for one release
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


class ClusterUnreachable(Exception):
    """The cluster cannot be asked at all: no kubeconfig, an unknown context, no answer, or no credentials."""


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A client for the kubeconfig and context given (else KUBECONFIG or ~/.kube/config, else in-cluster)."""
    config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=config
        )
    except (kubernetes.config.ConfigException, OSError) as err:
        if kubeconfig or context:
            raise ClusterUnreachable(f"kubeconfig: {kubeconfig or 'default'}: cannot be loaded ({err})") from None
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            raise ClusterUnreachable(f"kubeconfig: none found: cannot be loaded ({err})") from None
    config.retries = 1
    return kubernetes.client.ApiClient(config)


def _json(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
    return json.loads(response.data)


def _get(call: Callable[..., Any], *args: Any) -> Any:
    """The object, or None when it does not exist."""
    try:
        return _json(call, *args)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise


def _items(call: Callable[..., Any], cap: int, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Items of a paginated list, at most `cap` of them."""
    token, seen = None, 0
    while True:
        page = _json(call, *args, limit=min(PAGE, cap - seen), _continue=token, **kwargs)
        for item in page.get("items") or []:
            yield item
            seen += 1
        token = (page.get("metadata") or {}).get("continue")
        if not token or seen >= cap:
            return


class _Gatherer:
    def __init__(self, client: Any, opts: Options, catalog: AcceleratorCatalog) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.client = client
        self.host = str(client.configuration.host)
        self.opts = opts
        self.catalog = catalog
        self.notes: list[str] = []

    def readable(self, what: str, read: Callable[[], Any], default: Any) -> Any:
        """`read()`, or `default` with a note when the API server refuses doctor's own credentials."""
        try:
            return read()
        except kubernetes.client.ApiException as err:
            if err.status in (401, 403):
                self.notes.append(f"{what}: {refusal(err)}")
                return default
            raise

    def version(self) -> str:
        info = kubernetes.client.VersionApi(self.client).get_code(_request_timeout=TIMEOUT)
        return str(info.git_version)

    def nodes(self) -> tuple[tuple[NodeFact, ...], bool]:
        items = list(_items(self.core.list_node, MAX_NODES + 1))
        facts = tuple(
            NodeFact(
                str(n["metadata"]["name"]),
                dict(n["metadata"].get("labels") or {}),
                dict((n.get("status") or {}).get("allocatable") or {}),
            )
            for n in items[:MAX_NODES]
        )
        return facts, len(items) > MAX_NODES

    def crds(self) -> dict[str, CRDFact]:
        api = kubernetes.client.ApiextensionsV1Api(self.client)
        found = {}
        for name in (*GLMOPS_CRDS, LWS_CRD, *MONITORING_CRDS, *CERT_MANAGER_CRDS):
            obj = _get(api.read_custom_resource_definition, name)
            if obj is None:
                continue
            versions = obj["spec"].get("versions") or []
            conditions = (obj.get("status") or {}).get("conditions") or []
            found[name] = CRDFact(
                name,
                served=tuple(v["name"] for v in versions if v.get("served")),
                storage=next((v["name"] for v in versions if v.get("storage")), None),
                established=any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions),
            )
        return found

    def deployments(self) -> tuple[DeploymentFact, ...]:
        api = kubernetes.client.CustomObjectsApi(self.client)
        items = _items(api.list_cluster_custom_object, MAX_LISTED, GROUP, VERSION, PLURAL)
        return tuple(
            DeploymentFact(
                str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"]), nodes_per_replica(o, self.catalog)
            )
            for o in items
        )

    def storage_classes(self) -> tuple[StorageClassFact, ...]:
        api = kubernetes.client.StorageV1Api(self.client)
        return tuple(
            StorageClassFact(
                str(c["metadata"]["name"]),
                any((c["metadata"].get("annotations") or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS),
            )
            for c in _items(api.list_storage_class, MAX_LISTED)
        )

    def release(self) -> tuple[ReleaseFact | None, list[dict[str, Any]]]:
        """The deployed revision of the release, from Helm's release Secrets (the newest one deployed)."""
        # Selected by status too: with many revisions kept, the deployed one need not be among the first listed.
        selector = f"owner=helm,name={self.opts.release},status=deployed"
        deployed = list(_items(self.core.list_namespaced_secret, 64, self.opts.namespace, label_selector=selector))
        if not deployed:
            others = f"owner=helm,name={self.opts.release}"
            revisions = _items(self.core.list_namespaced_secret, 1, self.opts.namespace, label_selector=others)
            if next(iter(revisions), None) is not None:
                self.notes.append(
                    f"release {self.opts.release}: no deployed revision (helm status {self.opts.release})"
                )
            return None, []
        newest = max(deployed, key=lambda r: int((r["metadata"].get("labels") or {}).get("version") or 0))
        try:
            release = decode_release(str((newest.get("data") or {}).get("release", "")))
            objects = manifest_objects(release)
        except ReleaseRecordError as err:
            self.notes.append(f"release record {newest['metadata']['name']}: {err}")
            return None, []
        return release_fact(release, objects), objects

    def webhook_configs(self, rel: ReleaseFact) -> tuple[tuple[WebhookConfigFact, ...], dict[str, Any] | None]:
        """The release's configurations as installed, and the validating one's first namespaceSelector."""
        api = kubernetes.client.AdmissionregistrationV1Api(self.client)
        read = {
            "MutatingWebhookConfiguration": api.read_mutating_webhook_configuration,
            "ValidatingWebhookConfiguration": api.read_validating_webhook_configuration,
        }
        facts, selector = [], None
        for kind, name in rel.webhook_configs:
            obj = _get(read[kind], name)
            if obj is None:
                facts.append(WebhookConfigFact(kind, name, exists=False))
                continue
            hooks = []
            for hook in obj.get("webhooks") or []:
                client = hook.get("clientConfig") or {}
                service = client.get("service")
                hooks.append(
                    WebhookFact(
                        str(hook["name"]),
                        bool(client.get("caBundle")),
                        (str(service["namespace"]), str(service["name"])) if service else None,
                    )
                )
                if kind.startswith("Validating") and selector is None:
                    selector = hook.get("namespaceSelector") or {}
            facts.append(WebhookConfigFact(kind, name, exists=True, webhooks=tuple(hooks)))
        return tuple(facts), selector

    def ready_endpoints(self, configs: tuple[WebhookConfigFact, ...]) -> dict[tuple[str, str], int]:
        api = kubernetes.client.DiscoveryV1Api(self.client)
        ready: dict[tuple[str, str], int] = {}
        for namespace, name in {h.service for c in configs for h in c.webhooks if h.service}:
            selector = f"kubernetes.io/service-name={name}"
            slices = _items(api.list_namespaced_endpoint_slice, 64, namespace, label_selector=selector)
            ready[(namespace, name)] = sum(
                1
                for s in slices
                for e in s.get("endpoints") or []
                if (e.get("conditions") or {}).get("ready") is not False
            )
        return ready

    def certificate(self, rel: ReleaseFact) -> SecretFact | None:
        name = rel.certificate_secret
        if name is None:
            return None

        def read() -> SecretFact:
            obj = _get(self.core.read_namespaced_secret, name, rel.namespace)
            if obj is None:
                return SecretFact(name, exists=False)
            return SecretFact(name, exists=True, keys=frozenset(obj.get("data") or {}))

        fact: SecretFact = self.readable(
            f"Secret {rel.namespace}/{name}", read, SecretFact(name, False, readable=False)
        )
        return fact

    def dry_run(self, selector: dict[str, Any] | None) -> DryRunFact:
        namespace = probe_namespace(selector)
        api = kubernetes.client.CustomObjectsApi(self.client)
        try:
            api.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, probe_object(namespace), dry_run="All", _request_timeout=TIMEOUT
            )
        except kubernetes.client.ApiException as err:
            message = refusal(err)
            return DryRunFact(namespace, "refused-by-rule" if names_a_rule(message) else "failed", message)
        except API_UNREACHABLE as err:
            return DryRunFact(namespace, "failed", f"no answer: {err}")
        return DryRunFact(namespace, "admitted")

    def access(self, rel: ReleaseFact, objects: list[dict[str, Any]]) -> tuple[tuple[AccessFact, ...], bool]:
        """A SubjectAccessReview for each permission the release grants its ServiceAccount."""
        api = kubernetes.client.AuthorizationV1Api(self.client)
        user = f"system:serviceaccount:{rel.namespace}:{rel.service_account}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{rel.namespace}", "system:authenticated"]
        facts = []
        for perm in granted_permissions(objects, rel.service_account, rel.namespace)[:MAX_PERMISSIONS]:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": _attributes(perm)},
            }
            try:
                answer = _json(api.create_subject_access_review, review)
            except kubernetes.client.ApiException as err:
                if err.status in (401, 403):
                    self.notes.append(f"SubjectAccessReview: {refusal(err)}")
                    return (), False
                raise
            status = answer.get("status") or {}
            facts.append(AccessFact(perm, bool(status.get("allowed")), str(status.get("reason") or "")))
        return tuple(facts), True


def _attributes(perm: Permission) -> dict[str, str]:
    attrs = {"verb": perm.verb, "group": perm.group, "resource": perm.resource}
    for key, value in (("subresource", perm.subresource), ("namespace", perm.namespace), ("name", perm.name)):
        if value:
            attrs[key] = value
    return attrs


def gather(opts: Options, catalog: AcceleratorCatalog, kubeconfig: str | None, context: str | None) -> Snapshot:
    """One snapshot of the cluster; raises ClusterUnreachable when it cannot be asked at all."""
    g = _Gatherer(api_client(kubeconfig, context), opts, catalog)
    try:
        version = g.version()
    except API_UNREACHABLE as err:
        raise ClusterUnreachable(f"API server: {g.host}: no answer ({err})") from None
    except kubernetes.client.ApiException as err:
        raise ClusterUnreachable(f"API server: {g.host}: refused doctor ({refusal(err)})") from None
    try:
        return _gather_rest(g, version)
    except API_UNREACHABLE as err:
        raise ClusterUnreachable(f"API server: {g.host}: stopped answering ({err})") from None
    except kubernetes.client.ApiException as err:
        # A 429, a 500, an expired continue token: the cluster could not be asked, which is exit 2, not a finding.
        raise ClusterUnreachable(f"API server: {g.host}: failed a request ({refusal(err)})") from None


def _gather_rest(g: _Gatherer, version: str) -> Snapshot:
    nodes, truncated = g.readable("nodes", g.nodes, ((), False))
    crds = g.readable("CustomResourceDefinitions", g.crds, {})
    deployments = g.readable("GLMDeployments", g.deployments, ()) if GLMOPS_CRDS[0] in crds else ()
    classes = g.readable("StorageClasses", g.storage_classes, ())
    rel, objects = g.readable(f"Secrets in {g.opts.namespace} (Helm's release)", g.release, (None, []))
    configs: tuple[WebhookConfigFact, ...] = ()
    ready: dict[tuple[str, str], int] = {}
    secret: SecretFact | None = None
    dry_run: DryRunFact | None = None
    access: tuple[AccessFact, ...] = ()
    asked = True
    if rel is not None:
        configs, selector = g.readable("webhook configurations", lambda: g.webhook_configs(rel), ((), None))
        ready = g.readable("EndpointSlices", lambda: g.ready_endpoints(configs), {})
        secret = g.certificate(rel)
        if rel.webhook_configs and GLMOPS_CRDS[0] in crds:
            dry_run = g.dry_run(selector)
        access, asked = g.access(rel, objects)
    return Snapshot(
        server_version=version,
        nodes=nodes,
        nodes_truncated=truncated,
        crds=crds,
        deployments=deployments,
        storage_classes=classes,
        release=rel,
        webhook_configs=configs,
        ready_endpoints=ready,
        certificate=secret,
        dry_run=dry_run,
        access=access,
        access_asked=asked,
        notes=tuple(g.notes),
    )
