"""Operator-wide kopf settings: our own finalizer and annotation prefix, and the admission server."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import time
import zlib
from collections.abc import Mapping
from typing import Any

import kopf

from glm_operator.api.constants import MANAGED, OWNED_KINDS, SERVING, selector
from glm_operator.control.runtime import REGISTRATION, Runtime
from glm_operator.handlers import admission
from glm_operator.k8s import logs
from glm_operator.k8s.metrics import serve_metrics
from glm_operator.k8s.webhooks import SecretWebhookServer, webhook_server_from_env

PREFIX = "glmops.dev"
# kopf's resource arguments of each owned kind: (group, version, plural), or (version, plural) for the core group.
OWNED_RESOURCES = tuple((k.group, k.version, k.plural) if k.group else (k.version, k.plural) for k in OWNED_KINDS)


@kopf.on.login(id="glmops-login")
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own client login; Events on cluster-scoped GLMImages go to the build namespace, not `default`."""
    # kopf posts an Event about a cluster-scoped object into its login's default namespace, which the
    # Kubernetes client leaves unset (so: `default`, where the chart grants nothing). The build namespace is
    # where the GLMImage's Job and context live, and where the chart lets the operator post Events.
    info = kopf.login_via_client(**kwargs)
    if info is None or not REGISTRATION.enabled:
        return info
    return dataclasses.replace(info, default_namespace=REGISTRATION.namespace)


@kopf.on.startup(id="glmops-settings")
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Build the runtime context; keep kopf's progress in glmops.dev/ annotations; our finalizer; webhooks."""
    logs.install()  # one line per record, secret-like values redacted, in the log and in Events
    try:
        logging.getLogger().setLevel(log_level(os.environ))
        memo.runtime = Runtime.from_env(os.environ).sharing_state_of(getattr(memo, "runtime", None))
    except ValueError as err:  # a malformed setting (log level, image policy): retrying cannot fix it
        raise kopf.PermanentError(str(err)) from err
    memo.runtime.catalogs.get()  # the first read of a catalog ConfigMap here, not inside the first review
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = 20  # INFO and above become Kubernetes Events
    # With several replicas (kopf peering), the newest operator wins: a rolling update's new pod takes
    # over at once and the old one pauses until it is gone, so a rollout never freezes behind the old.
    settings.peering.priority = peering_priority(os.environ, time.time(), socket.gethostname())
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # Owned objects are watched with a server-side label selector: never every object in the cluster.
    for resource in OWNED_RESOURCES:
        settings.watching.label_selectors[resource] = selector(MANAGED)
    # Only the operator's own serving pods are watched (for the canary gate), selected by the server.
    settings.watching.label_selectors["v1", "pods"] = selector(SERVING)
    if os.environ.get("GLMOPS_METRICS_PORT"):
        serve_metrics(int(os.environ["GLMOPS_METRICS_PORT"]))
    try:
        server = webhook_server_from_env(os.environ)
    except ValueError as err:  # a malformed setting: retrying cannot fix it
        raise kopf.PermanentError(str(err)) from err
    if server is not None:
        server.answer = functools.partial(admission.answer, context=memo.runtime)
        settings.admission.server = server
        # The chart owns its webhook configurations: kopf must never write them, nor remove them on shutdown.
        settings.admission.managed = None if isinstance(server, SecretWebhookServer) else PREFIX


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def peering_priority(env: Mapping[str, str], now: float, pod_name: str) -> int:
    """This replica's kopf peering priority: GLMOPS_PEERING_PRIORITY, else the newer start the higher.

    Milliseconds since the epoch, times 1000, plus a tiebreaker from the pod's name: kopf pauses *every* operator
    when two peers share a priority, and two replicas of one Deployment start within the same second (with
    whole seconds, a fresh install of the chart's two replicas reconciled nothing).
    """
    if env.get("GLMOPS_PEERING_PRIORITY"):
        return int(env["GLMOPS_PEERING_PRIORITY"])
    return int(now * 1000) * 1000 + zlib.crc32(pod_name.encode()) % 1000


def log_level(env: Mapping[str, str]) -> str:
    """GLMOPS_LOG_LEVEL (the chart's logLevel), INFO when unset; anything else stops the operator with the fix."""
    level = env.get("GLMOPS_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise ValueError(
            f"GLMOPS_LOG_LEVEL: {env['GLMOPS_LOG_LEVEL']!r} is not a log level; use one of {', '.join(LOG_LEVELS)}"
        )
    return level
