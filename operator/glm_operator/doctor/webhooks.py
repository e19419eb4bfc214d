"""The admission checks of `glmctl doctor`: the webhook's certificate, its configurations, its Service and whether
the API server's own call through them is answered (docs/webhooks.md)."""

from __future__ import annotations

from glm_operator.doctor.facts import Finding, Level, ReleaseFact, Snapshot, WebhookConfigFact

CERT_MANAGER_CRDS = ("certificates.cert-manager.io", "issuers.cert-manager.io")
CERT_MANAGER_FIX = (
    "Install cert-manager with its CA injector (https://cert-manager.io/docs/installation/), or set "
    "webhook.certManager.enabled=false to let the operator keep the certificate"
)
TLS_KEYS = frozenset({"tls.crt", "tls.key", "ca.crt"})
INSTANCE_LABEL = "app.kubernetes.io/instance"


def _logs(rel: ReleaseFact) -> str:
    return f"`kubectl -n {rel.namespace} logs -l {INSTANCE_LABEL}={rel.name}`"


def _cert_manager_served(snap: Snapshot) -> list[str]:
    return [n for n in CERT_MANAGER_CRDS if n in snap.crds and snap.crds[n].established]


def _secret_fix(rel: ReleaseFact) -> str:
    if rel.cert_manager:
        return f"See why cert-manager has not issued it: `kubectl -n {rel.namespace} describe certificate`"
    return (
        f"The operator creates it when it starts: see its log ({_logs(rel)}), or create the Secret named in "
        "webhook.certificateSecret"
    )


def check_certificate(snap: Snapshot) -> list[Finding]:
    rel = snap.release
    subject = "webhook certificate"
    served = _cert_manager_served(snap)
    if rel is None:
        if len(served) == len(CERT_MANAGER_CRDS):
            return [
                Finding("certificate", Level.OK, "cert-manager CRDs", "served", "webhook.certManager.enabled works")
            ]
        detail = "the operator will generate and renew the webhook certificate (the default); "
        detail += "webhook.certManager.enabled needs cert-manager"
        return [Finding("certificate", Level.OK, "cert-manager CRDs", "not served", detail)]
    if rel.certificate_secret is None:
        return []
    findings = []
    if rel.cert_manager and len(served) < len(CERT_MANAGER_CRDS):
        missing = ", ".join(n for n in CERT_MANAGER_CRDS if n not in served)
        detail = "the release asks cert-manager for its certificate, and cert-manager is not installed"
        findings.append(
            Finding("certificate", Level.PROBLEM, "cert-manager CRDs", f"missing {missing}", detail, CERT_MANAGER_FIX)
        )
    secret = snap.certificate
    where = f"Secret {rel.namespace}/{rel.certificate_secret}"
    if secret is None or not secret.readable:
        findings.append(Finding("certificate", Level.WARNING, subject, where, "could not be read (forbidden)"))
    elif not secret.exists:
        findings.append(
            Finding(
                "certificate",
                Level.PROBLEM,
                subject,
                where,
                "missing: the webhook has no certificate to serve",
                _secret_fix(rel),
            )
        )
    elif missing_keys := sorted(TLS_KEYS - secret.keys):
        detail = f"lacks {', '.join(missing_keys)}: the webhook cannot serve it or the API server cannot trust it"
        findings.append(Finding("certificate", Level.PROBLEM, subject, where, detail, _secret_fix(rel)))
    else:
        source = "cert-manager" if rel.cert_manager else "the operator or you"
        findings.append(
            Finding("certificate", Level.OK, subject, where, f"holds ca.crt, tls.crt and tls.key (kept by {source})")
        )
    return findings


def _config_findings(config: WebhookConfigFact, rel: ReleaseFact) -> list[Finding]:
    subject = f"{config.kind} {config.name}"
    if not config.exists:
        detail = "the release's webhook configuration is missing: admission runs no glmops check"
        fix = "Restore it: `helm upgrade --install` the release with the same values"
        return [Finding("webhooks", Level.PROBLEM, subject, "missing", detail, fix)]
    findings = []
    for hook in config.webhooks:
        if hook.has_ca_bundle:
            continue
        if rel.cert_manager:
            fix = "Check that cert-manager's CA injector (cainjector) runs: it fills caBundle from the Certificate"
        else:
            fix = f"The operator fills it from its Secret at start: see its log ({_logs(rel)})"
        findings.append(
            Finding(
                "webhooks",
                Level.PROBLEM,
                f"{subject} webhook {hook.name}",
                "no caBundle",
                "the API server cannot verify the webhook's certificate",
                fix,
            )
        )
    if not findings:
        findings.append(Finding("webhooks", Level.OK, subject, "present", "every webhook has a caBundle"))
    return findings


def _endpoint_findings(snap: Snapshot, rel: ReleaseFact) -> list[Finding]:
    services = sorted({h.service for c in snap.webhook_configs for h in c.webhooks if h.service})
    findings = []
    for namespace, name in services:
        ready = snap.ready_endpoints.get((namespace, name), 0)
        subject = f"webhook Service {namespace}/{name}"
        if ready:
            findings.append(
                Finding(
                    "webhooks", Level.OK, subject, f"{ready} ready endpoints", "an operator replica serves admissions"
                )
            )
        else:
            detail = "no ready endpoint: no operator replica is ready to answer admissions"
            pods = f"`kubectl -n {namespace} get pods -l {INSTANCE_LABEL}={rel.name}`"
            fix = f"See why the operator pod is not ready: {pods} and its /readyz"
            findings.append(Finding("webhooks", Level.PROBLEM, subject, "0 ready endpoints", detail, fix))
    return findings


def _dry_run_findings(snap: Snapshot) -> list[Finding]:
    run = snap.dry_run
    if run is None:
        return []
    subject = f"dry-run create of a GLMDeployment in {run.namespace}"
    if run.outcome == "refused-by-rule":
        return [
            Finding(
                "webhooks", Level.OK, subject, "refused by a rule", "the API server called the webhook and it answered"
            )
        ]
    if run.outcome == "failed":
        fix = "Check the operator pods, the webhook Service and the caBundle (docs/webhooks.md)"
        return [Finding("webhooks", Level.PROBLEM, subject, "webhook unreachable", run.message, fix)]
    detail = "admitted a GLMDeployment the rules refuse: the webhook was not asked (its namespaceSelector or "
    detail += "objectSelector leaves this namespace out) or failurePolicy Ignore hid a failure"
    fix = "Check the webhook configurations' selectors and failurePolicy (chart values webhook.*)"
    return [Finding("webhooks", Level.WARNING, subject, "admitted", detail, fix)]


def check_webhooks(snap: Snapshot) -> list[Finding]:
    rel = snap.release
    if rel is None:
        return []
    if not rel.webhook_configs:
        detail = "the release serves no admission webhook (webhook.enabled=false): broken GLMDeployments are admitted"
        return [Finding("webhooks", Level.WARNING, "admission webhooks", "off", detail, "Set webhook.enabled=true")]
    findings = [f for config in snap.webhook_configs for f in _config_findings(config, rel)]
    return findings + _endpoint_findings(snap, rel) + _dry_run_findings(snap)
