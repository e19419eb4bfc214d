"""kopf settings from the environment: who manages the webhook configurations, and the log level."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
from collections.abc import Iterator

import kopf
import pytest

from glm_operator.handlers.settings import PREFIX, configure
from glm_operator.k8s.webhooks import SecretWebhookServer, webhook_answers
from glm_operator.render.webhook_certs import generate, service_dns_names

CHART_ENV = {
    "GLMOPS_WEBHOOK_SERVICE": "ops/glmops-webhook",
    "GLMOPS_WEBHOOK_SECRET": "ops/glmops-webhook-cert",
    "GLMOPS_WEBHOOK_SECRET_OWNED": "true",
    "GLMOPS_WEBHOOK_INJECT_CA_INTO": "glmops-ops,glmops-ops",
}


@pytest.fixture(autouse=True)
def _root_level() -> Iterator[None]:
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


def _configured(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> kopf.OperatorSettings:
    for key in ("GLMOPS_METRICS_PORT", "GLMOPS_WEBHOOK", *CHART_ENV):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = kopf.OperatorSettings()
    configure(settings=settings, memo=kopf.Memo())
    return settings


def test_under_the_chart_kopf_never_manages_the_webhook_configurations(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _configured(monkeypatch, CHART_ENV)
    assert isinstance(settings.admission.server, SecretWebhookServer)
    assert settings.admission.managed is None


def test_a_local_process_lets_kopf_manage_its_own_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _configured(monkeypatch, {"GLMOPS_WEBHOOK_HOST": "127.0.0.1"})
    assert settings.admission.managed == PREFIX


@pytest.mark.parametrize("value, level", [("DEBUG", logging.DEBUG), ("WARNING", logging.WARNING), ("", logging.INFO)])
def test_glmops_log_level_sets_the_operator_log_level(monkeypatch: pytest.MonkeyPatch, value: str, level: int) -> None:
    logging.getLogger().setLevel(logging.ERROR)
    _configured(monkeypatch, {"GLMOPS_LOG_LEVEL": value})
    assert logging.getLogger().level == level


def test_an_unknown_log_level_stops_the_operator_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kopf.PermanentError, match="GLMOPS_LOG_LEVEL: 'chatty' is not a log level; use one of"):
        _configured(monkeypatch, {"GLMOPS_LOG_LEVEL": "chatty"})


def test_a_malformed_image_policy_stops_the_operator_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = '{"allowedRepositories": ["registry.example.com/team:v1"]}'
    with pytest.raises(kopf.PermanentError, match=r"imagePolicy.allowedRepositories: .* has no tag or digest"):
        _configured(monkeypatch, {"GLMOPS_IMAGE_POLICY": policy})


def test_the_image_policy_reaches_the_catalogs_every_handler_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("GLMOPS_CATALOG_CONFIGMAP", "GLMOPS_METRICS_PORT", "GLMOPS_WEBHOOK", *CHART_ENV):
        monkeypatch.delenv(key, raising=False)
    memo = kopf.Memo()
    monkeypatch.setenv("GLMOPS_IMAGE_POLICY", '{"allowCustomImages": false}')
    configure(settings=kopf.OperatorSettings(), memo=memo)
    assert memo.runtime.catalogs.get().image_policy.allow_custom_images is False


def test_chart_mode_needs_the_service_and_the_secret_in_one_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kopf.PermanentError, match="GLMOPS_WEBHOOK_SERVICE and GLMOPS_WEBHOOK_SECRET must both be"):
        _configured(monkeypatch, {**CHART_ENV, "GLMOPS_WEBHOOK_SECRET": "other/glmops-webhook-cert"})


def test_readiness_reports_why_before_a_certificate_or_a_server() -> None:
    assert asyncio.run(webhook_answers(9443, None, "glmops-webhook.ops.svc", None)) == "no certificate loaded yet"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: nothing answers there
        certs = generate(service_dns_names("glmops-webhook", "ops"), datetime.datetime.now(datetime.UTC))
        problem = asyncio.run(webhook_answers(port, certs, "glmops-webhook.ops.svc", "127.0.0.1"))
    assert "ClientConnectorError" in problem
