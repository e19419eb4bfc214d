"""The webhook certificate's Kubernetes side: the Secret that holds it and the caBundle of the configurations.

Installed by the chart, the operator never creates, changes or deletes a webhook configuration; it only patches
the `caBundle` of the two the chart rendered, by name, when it owns the certificate (docs/webhooks.md).
Owned (`GLMOPS_WEBHOOK_SECRET_OWNED=true`): the operator creates the Secret once (the first replica to create it
wins; a 409 means another replica did, and its material is read back) and renews it in place under the Secret's
resourceVersion, so two replicas never overwrite each other. Not owned (cert-manager or a user's Secret): it
only reads it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes

from glm_operator.k8s.client import api_client, core_v1
from glm_operator.render.webhook_certs import (
    Renewal,
    WebhookCertificates,
    from_secret_data,
    generate,
    renewal_needed,
    service_dns_names,
    to_secret_data,
)

log = logging.getLogger(__name__)
WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class CertificateSource:
    """Where the serving certificate is kept, whether the operator owns it, and which configurations trust it."""

    namespace: str
    secret: str
    service: str
    owned: bool
    mutating: str | None
    validating: str | None

    @property
    def dns_names(self) -> list[str]:
        return service_dns_names(self.service, self.namespace)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CertificateSource:
        """From GLMOPS_WEBHOOK_SERVICE / _SECRET (namespace/name), _SECRET_OWNED and _INJECT_CA_INTO (two names)."""
        namespace, _, service = env.get("GLMOPS_WEBHOOK_SERVICE", "").partition("/")
        secret_ns, _, secret = env.get("GLMOPS_WEBHOOK_SECRET", "").partition("/")
        if not (namespace and service and secret and secret_ns == namespace):
            raise ValueError(
                "GLMOPS_WEBHOOK_SERVICE and GLMOPS_WEBHOOK_SECRET must both be <namespace>/<name> in one namespace "
                f"(got {env.get('GLMOPS_WEBHOOK_SERVICE')!r} and {env.get('GLMOPS_WEBHOOK_SECRET')!r}); "
                "the chart sets both"
            )
        inject = [n for n in env.get("GLMOPS_WEBHOOK_INJECT_CA_INTO", "").split(",") if n]
        if inject and len(inject) != 2:
            raise ValueError(
                "GLMOPS_WEBHOOK_INJECT_CA_INTO: expected '<mutating configuration>,<validating configuration>', "
                f"got {env['GLMOPS_WEBHOOK_INJECT_CA_INTO']!r}"
            )
        return cls(
            namespace=namespace,
            secret=secret,
            service=service,
            owned=env.get("GLMOPS_WEBHOOK_SECRET_OWNED", "false") == "true",
            mutating=inject[0] if inject else None,
            validating=inject[1] if inject else None,
        )


def _status(err: kubernetes.client.ApiException) -> int:
    return int(err.status or 0)


def _read_secret(source: CertificateSource) -> Any | None:
    try:
        return core_v1().read_namespaced_secret(source.secret, source.namespace)
    except kubernetes.client.ApiException as err:
        if _status(err) == 404:
            return None
        raise


def _secret_body(source: CertificateSource, certs: WebhookCertificates, resource_version: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": source.secret,
        "namespace": source.namespace,
        "labels": {"app.kubernetes.io/managed-by": "glmops", "app.kubernetes.io/component": "webhook-certificate"},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "kubernetes.io/tls",
            "data": to_secret_data(certs)}  # fmt: skip


def _ensure_owned(source: CertificateSource, now: datetime.datetime) -> WebhookCertificates:
    """Read the Secret; create or renew it when needed. Another replica's concurrent write wins and is read back."""
    name = f"{source.namespace}/{source.secret}"
    for _ in range(WRITE_ATTEMPTS):
        secret = _read_secret(source)
        current = None
        if secret is not None:
            try:
                current = from_secret_data(secret.data, name)
            except ValueError as err:
                log.warning("webhook certificate Secret %s unusable, replacing it: %s", name, err)
        renewal = renewal_needed(current, source.dns_names, now)
        if current is not None and renewal is Renewal.NONE:
            return current
        fresh = generate(source.dns_names, now, renewal=renewal, current=current)
        try:
            if secret is None:
                core_v1().create_namespaced_secret(source.namespace, _secret_body(source, fresh, None))
            else:
                body = _secret_body(source, fresh, secret.metadata.resource_version)
                core_v1().replace_namespaced_secret(source.secret, source.namespace, body)
        except kubernetes.client.ApiException as err:
            if _status(err) == 409:
                continue  # another replica wrote first: use what it wrote
            raise
        log.info("webhook certificate Secret %s: new %s", name, renewal.value)
        return fresh
    raise RuntimeError(f"webhook certificate Secret {name} kept changing under {WRITE_ATTEMPTS} attempts to write it")


def _read_given(source: CertificateSource) -> WebhookCertificates:
    name = f"{source.namespace}/{source.secret}"
    secret = _read_secret(source)
    if secret is None:
        raise RuntimeError(
            f"webhook certificate Secret {name} not found: create it (kubernetes.io/tls with ca.crt), or let "
            "cert-manager issue it (webhook.certManager.enabled), or leave webhook.certificateSecret empty"
        )
    return from_secret_data(secret.data, name, keys=("ca.crt", "tls.crt", "tls.key"))


def _inject_ca(kind: str, name: str, bundle: bytes) -> bool:
    """Set caBundle on every webhook of one configuration, by name; True when it had to change."""
    api = kubernetes.client.AdmissionregistrationV1Api(api_client())
    read = getattr(api, f"read_{kind}_webhook_configuration")
    patch = getattr(api, f"patch_{kind}_webhook_configuration")
    config = api_client().sanitize_for_serialization(read(name))
    wanted = base64.b64encode(bundle).decode("ascii")
    ops: list[dict[str, Any]] = []
    for i, webhook in enumerate(config.get("webhooks") or []):
        if webhook.get("clientConfig", {}).get("caBundle") != wanted:
            # The test pins the index to the webhook it was read as, so a concurrent reorder fails the patch.
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook["name"]})
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted})
    if ops:
        patch(name, ops)
        log.info("%sWebhookConfiguration %s: caBundle set", kind.capitalize(), name)
    return bool(ops)


def sync_certificates(source: CertificateSource, now: datetime.datetime) -> WebhookCertificates:
    """The certificate to serve now (created or renewed when owned), with the configurations made to trust it."""
    certs = _ensure_owned(source, now) if source.owned else _read_given(source)
    if source.mutating and source.validating:
        _inject_ca("mutating", source.mutating, certs.ca_bundle)
        _inject_ca("validating", source.validating, certs.ca_bundle)
    return certs


async def sync_certificates_async(source: CertificateSource) -> WebhookCertificates:
    """`sync_certificates` off the event loop (the Kubernetes client blocks)."""
    now = datetime.datetime.now(datetime.UTC)
    return await asyncio.to_thread(sync_certificates, source, now)
