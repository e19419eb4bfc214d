"""What `glmctl doctor` knows of a cluster: the facts `k8s/doctor.py` gathers, and the findings the checks return.

Every fact is plain data read once from the API server; the checks (`doctor/checks.py`) decide from them alone, so
each check has a unit test without a cluster. Secrets are described by their key names only, never their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal


class Level(StrEnum):
    """How much a finding matters: a problem makes `glmctl doctor` exit 1, a warning does not."""

    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


@dataclass(frozen=True)
class Finding:
    """One thing a check found, in the words a person acts on: `<what>: <value>: <what goes wrong>. <fix>.`"""

    check: str
    level: Level
    subject: str
    value: str
    detail: str
    fix: str = ""

    @property
    def message(self) -> str:
        text = f"{self.subject}: {self.value}: {self.detail}."
        return f"{text} {self.fix}." if self.fix else text


@dataclass(frozen=True)
class Options:
    """What the person asked `glmctl doctor` to expect."""

    namespace: str = "glmops-system"
    release: str = "glmops"
    multi_node: bool = False
    monitoring: bool = False


@dataclass(frozen=True)
class NodeFact:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, str]


@dataclass(frozen=True)
class CRDFact:
    """A CustomResourceDefinition as installed: the versions it serves, the one it stores, and whether it is ready."""

    name: str
    served: tuple[str, ...]
    storage: str | None
    established: bool = True


@dataclass(frozen=True)
class DeploymentFact:
    """A GLMDeployment already in the cluster, as far as doctor cares: how many nodes one replica spans."""

    namespace: str
    name: str
    nodes_per_replica: int


@dataclass(frozen=True)
class StorageClassFact:
    name: str
    default: bool


@dataclass(frozen=True)
class WebhookFact:
    """One webhook of a configuration: whether the API server has a CA to trust, and the Service it calls."""

    name: str
    has_ca_bundle: bool
    service: tuple[str, str] | None  # namespace, name; None for a URL clientConfig


@dataclass(frozen=True)
class WebhookConfigFact:
    kind: str  # MutatingWebhookConfiguration or ValidatingWebhookConfiguration
    name: str
    exists: bool
    webhooks: tuple[WebhookFact, ...] = ()


@dataclass(frozen=True)
class SecretFact:
    """The webhook certificate's Secret: whether it is there and which keys it holds (never their values)."""

    name: str
    exists: bool
    keys: frozenset[str] = frozenset()
    readable: bool = True


DryRunOutcome = Literal["refused-by-rule", "admitted", "failed"]


@dataclass(frozen=True)
class DryRunFact:
    """What the API server answered to a server-side dry-run create of the probe GLMDeployment."""

    namespace: str
    outcome: DryRunOutcome
    message: str = ""


@dataclass(frozen=True)
class Permission:
    """One request the operator's ServiceAccount makes, as a SubjectAccessReview asks about it."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""  # empty: cluster-wide
    name: str = ""

    def describe(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            resource += f".{self.group}"
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {resource}{named}{where}"


@dataclass(frozen=True)
class AccessFact:
    permission: Permission
    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class ReleaseFact:
    """The installed glmops Helm release, from its release record: what the chart rendered."""

    name: str
    namespace: str
    revision: int
    chart_version: str
    service_account: str
    kinds: frozenset[str]  # kinds of the rendered objects, e.g. ServiceMonitor, Certificate
    webhook_configs: tuple[tuple[str, str], ...]  # (kind, name)
    certificate_secret: str | None  # the Secret the operator serves the webhook from; None without webhooks
    cert_manager: bool


@dataclass(frozen=True)
class Snapshot:
    """Everything `glmctl doctor` read from one cluster."""

    server_version: str
    nodes: tuple[NodeFact, ...] = ()
    nodes_truncated: bool = False
    crds: Mapping[str, CRDFact] = field(default_factory=dict)
    deployments: tuple[DeploymentFact, ...] = ()
    storage_classes: tuple[StorageClassFact, ...] = ()
    release: ReleaseFact | None = None
    webhook_configs: tuple[WebhookConfigFact, ...] = ()
    ready_endpoints: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (namespace, service) -> ready
    certificate: SecretFact | None = None
    dry_run: DryRunFact | None = None
    access: tuple[AccessFact, ...] = ()
    access_asked: bool = True  # False: doctor itself may not create SubjectAccessReviews
    notes: tuple[str, ...] = ()  # what could not be read (a 403 on a list), said as warnings
