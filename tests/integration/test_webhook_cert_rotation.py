"""Webhook certificate rotation while admissions stream through the API server: how many fail, and when.

The operator runs as the chart runs it (tests/integration/test_chart_mode_webhooks.py: its Service routed to a
loopback address, the chart's two configurations, the certificate in a Secret it owns, resync every 2 s). A thread
sends GLMDeployment dry-run creates through the API server at 20 a second; the test forces a serving certificate
renewal (the Secret's certificate no longer names the Service), then a new CA (the Secret deleted, docs/webhooks.md
"Force a new CA"), and counts the admissions that failed in each phase.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.test_chart_mode_webhooks import (  # noqa: F401 (fixtures)
    ChartOperator,
    _ca_bundles,
    _refused_through_the_api_server,
    _secret_ca,
    _served_serial,
    chart_operator,
    chart_setup,
)
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import Cluster, Kubectl, eventually

pytestmark = pytest.mark.cluster
RATE = 20.0  # admissions a second
SETTLE_S = 3.0
ROUNDS = 3  # each: a serving renewal, then a new CA


@dataclass
class Admissions:
    """Dry-run creates of a valid GLMDeployment through the API server, at RATE a second, in a thread."""

    url: str
    client: httpx.Client
    body: dict[str, Any]
    results: list[tuple[float, int, str]] = field(default_factory=list)  # (when, HTTP status, message)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(4)]
        for thread in self._threads:
            thread.start()

    def _loop(self, index: int) -> None:
        period = 4 / RATE  # four threads, each one request per period
        next_at = time.monotonic() + index * period / 4
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                response = self.client.post(self.url, params={"dryRun": "All"}, json=self.body, timeout=15)
                status, message = response.status_code, response.text[:300]
            except httpx.HTTPError as err:
                status, message = 0, f"{type(err).__name__}: {err}"
            self.results.append((at, status, message))
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def between(self, start: float, end: float) -> tuple[int, list[tuple[float, int, str]]]:
        sent = [r for r in self.results if start <= r[0] < end]
        return len(sent), [r for r in sent if r[1] != 201]


def _admissions(cluster: Cluster, namespace: str) -> Admissions:
    certs = cluster.state_dir / "certs"
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
    server = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    url = f"{server}/apis/glmops.dev/v1alpha1/namespaces/{namespace}/glmdeployments"
    body = B("rotation").namespace(namespace).accelerator("GB300").tensor(4).build()
    return Admissions(url, httpx.Client(verify=context), body)


def _serves_under(op: ChartOperator, ca: str) -> bool:
    try:
        return bool(_served_serial(op, base64.b64decode(ca)))
    except ssl.SSLError as err:  # still the previous CA's certificate
        raise AssertionError(err) from err


def test_rotating_the_webhook_certificate_under_a_stream_of_admissions(
    cluster: Cluster, kubectl: Kubectl, request: pytest.FixtureRequest
) -> None:
    op: ChartOperator = request.getfixturevalue("chart_operator")  # the chart-mode test's fixture, imported above
    ca = eventually(lambda: _secret_ca(kubectl, op), timeout=60, what="the certificate Secret")
    eventually(lambda: _ca_bundles(kubectl, op.config) == [ca, ca], timeout=60, what="caBundle")
    eventually(lambda: _refused_through_the_api_server(kubectl, op.namespace), timeout=60, what="admission")
    load = _admissions(cluster, op.namespace)
    load.start()
    renewals: list[tuple[float, float, float]] = []  # (forced at, switched at, next phase at)
    new_cas: list[tuple[float, float, float]] = []
    try:
        time.sleep(SETTLE_S)
        for _ in range(ROUNDS):
            renewals.append(_force_serving_renewal(kubectl, op, ca))
            ca, phase = _force_new_ca(kubectl, op, ca)
            new_cas.append(phase)
        end = time.monotonic()
    finally:
        load.stop()
    assert op.proc.poll() is None, "the operator reloaded; it did not exit"

    steady_sent, steady_failed = load.between(0, renewals[0][0])
    renew = [load.between(forced, until) for forced, _, until in renewals]
    new_ca = [load.between(forced, until) for forced, _, until in new_cas]
    print(
        f"\nadmissions at {RATE:.0f}/s: steady {len(steady_failed)}/{steady_sent} failed;"
        f" {ROUNDS} serving renewals {sum(len(f) for _, f in renew)}/{sum(n for n, _ in renew)} failed (switched in"
        f" {', '.join(f'{b - a:.1f}' for a, b, _ in renewals)} s); {ROUNDS} new CAs"
        f" {sum(len(f) for _, f in new_ca)}/{sum(n for n, _ in new_ca)} failed (switched in"
        f" {', '.join(f'{b - a:.1f}' for a, b, _ in new_cas)} s);"
        f" {len(load.results)} sent in {end - renewals[0][0] + SETTLE_S:.0f} s"
    )
    for (_, failed), (forced, _, _) in zip(new_ca, new_cas, strict=True):
        for failure in failed:
            print(f"  failed {failure[0] - forced:.2f} s after the delete:", failure[1], failure[2][:240])
    assert steady_sent >= RATE * SETTLE_S * 0.5, "the stream ran at about its rate"
    assert steady_failed == [], steady_failed[:3]
    assert all(failed == [] for _, failed in renew), "a serving renewal keeps the CA: nothing fails"
    # The documented window of a new CA: until the replica has resynced (2 s here) and the API server has read
    # the new caBundle; nothing may fail once both have the new CA.
    late = [
        r for (_, failed), (_, switched, _) in zip(new_ca, new_cas, strict=True) for r in failed if r[0] >= switched
    ]
    assert late == [], late[:3]


def _force_serving_renewal(kubectl: Kubectl, op: ChartOperator, ca: str) -> tuple[float, float, float]:
    """The Secret's certificate made the CA's (it does not name the Service): the next resync issues a new one from
    the same CA, and caBundle stays as it is."""
    forced = time.monotonic()
    old_serial = _served_serial(op, base64.b64decode(ca))
    secret = kubectl.get("secret", op.secret, op.namespace)
    patch = json.dumps({"data": {"tls.crt": secret["data"]["ca.crt"]}})
    kubectl.run("patch", "secret", op.secret, "-n", op.namespace, "--type=merge", "-p", patch)
    eventually(lambda: _served_serial(op, base64.b64decode(ca)) != old_serial, timeout=30, what="a renewed certificate")
    switched = time.monotonic()
    assert _ca_bundles(kubectl, op.config) == [ca, ca], "a serving renewal keeps the CA"
    time.sleep(SETTLE_S)
    return forced, switched, time.monotonic()


def _force_new_ca(kubectl: Kubectl, op: ChartOperator, ca: str) -> tuple[str, tuple[float, float, float]]:
    """The Secret deleted (docs/webhooks.md "Force a new CA"): a new CA; the previous one is not kept."""
    forced = time.monotonic()
    kubectl.run("delete", "secret", op.secret, "-n", op.namespace)
    new_ca = eventually(lambda: (c := _secret_ca(kubectl, op)) != ca and c, timeout=30, what="a new CA")
    eventually(lambda: _ca_bundles(kubectl, op.config) == [new_ca, new_ca], timeout=30, what="the new caBundle")
    eventually(lambda: _serves_under(op, new_ca), timeout=30, what="the new CA's certificate served")
    switched = time.monotonic()
    time.sleep(SETTLE_S)
    return new_ca, (forced, switched, time.monotonic())
