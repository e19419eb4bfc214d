"""Debian's Prometheus for the real-vLLM tests: the chart's monitoring objects, scrape configs as the Prometheus
Operator writes them for the chart's PodMonitor, and a server started and stopped around a test.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.chart import TEMPLATE_FLAGS
from tests.support.cluster import REPO, eventually, pinned_helm

CHART = REPO / "charts" / "glmops"
RELEASE_NAMESPACE = "glmops-system"
_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "regex": "regex",
    "action": "action",
    "replacement": "replacement",
}


def binaries() -> tuple[str, str]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("prometheus is not installed: run hack/system-deps.sh (Debian package prometheus)")
    return prometheus, promtool


def chart_monitoring(values: list[str]) -> dict[str, dict[str, Any]]:
    """The chart's PrometheusRule and PodMonitor, rendered by the pinned helm with `--set` values."""
    helm = pinned_helm()
    if not helm.is_file():
        pytest.skip(f"helm is not built at {helm}: run cluster/build.sh (make tools)")
    args = [str(helm), "template", "glmops", str(CHART), "--namespace", RELEASE_NAMESPACE, *TEMPLATE_FLAGS]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    return {d["kind"]: d for d in yaml.safe_load_all(out) if d and d["kind"] in ("PrometheusRule", "PodMonitor")}


def meta_label(name: str) -> str:
    """A Kubernetes label name as service discovery spells it in __meta_kubernetes_pod_label_<name>."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_monitor_job(pod_monitor: dict[str, Any], discovery: dict[str, Any]) -> dict[str, Any]:
    """The PodMonitor's one endpoint as the Prometheus Operator turns it into a scrape job.

    The operator keeps the pods its selector matches and the container port the endpoint names, adds the
    namespace and pod labels, then applies the endpoint's own relabelings. `discovery` is the job's target source:
    kubernetes_sd_configs on a cluster, or static_configs carrying the same __meta labels.
    """
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    selector = pod_monitor["spec"]["selector"]["matchLabels"]
    keep = [
        {"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{meta_label(k)}"], "regex": v}
        for k, v in selector.items()
    ]
    keep.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http"})
    assert endpoint["port"] == "http", "the PodMonitor scrapes the port glmops names http"
    added = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    own = [{_KEYS[k]: v for k, v in r.items()} for r in endpoint["relabelings"]]
    name = pod_monitor["metadata"]["name"]
    return {
        "job_name": f"podMonitor/{RELEASE_NAMESPACE}/{name}/0",
        "scrape_interval": endpoint["interval"],
        "metrics_path": endpoint["path"],
        **discovery,
        "relabel_configs": keep + added + own,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, "Prometheus exited: see prometheus.log beside its configuration"
    try:
        return httpx.get(f"{url}/-/ready").status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def running(config: dict[str, Any], work: Path) -> Iterator[str]:
    """Prometheus on its own port with storage under `work`; its URL while the block runs."""
    prometheus, _ = binaries()
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{_free_port()}"
    argv = [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}"]
    with (work / "prometheus.log").open("wb") as log:
        process = subprocess.Popen([*argv, f"--web.listen-address={address}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: _ready(f"http://{address}", process), timeout=60, what="Prometheus to be ready")
            yield f"http://{address}"
        finally:
            process.terminate()
            process.wait(30)


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result
