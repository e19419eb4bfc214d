"""Watch scale (issue 16 item 4): the operator's memory and CPU with N unrelated pods in the cluster.

The operator watches pods with a server-side label selector (only its serving pods), so pods without glmops'
labels must cost it nothing. Two runs of the same timeline, each with a fresh operator (`kopf run`):
- control: the operator idles through the windows `before`, `during` and `after`; no pods are created;
- pods: the same, and during `during` N pods without glmops' labels are created (bound to the fake nodes, so
  kwok runs them and writes their status: the API server sees the whole lifecycle), left in place for `after`.
Reported per window: the operator's CPU seconds (utime + stime from /proc) and its RSS at the window's end,
both runs side by side, and their ratios (pods / control). Target: each ratio ~1 (checked: CPU seconds per
second of window and RSS within 1.25x of control, or less than 0.5 CPU s apart).
Run: `.venv/bin/python bench/watch_scale.py [--pods 10000]`. Prints JSON; exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.admission import wait_for_webhooks
from bench.harness import REPO, Cluster, Operator, emit, log, proc_usage

NAMESPACE = "bench-unrelated-pods"


def create_pods(cluster: Cluster, count: int, threads: int) -> float:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "glmops.dev/fake-node=true", "-o", "json").stdout)
    names = [n["metadata"]["name"] for n in nodes["items"]]
    local = threading.local()

    def one(i: int) -> None:
        s = local.__dict__.setdefault("s", cluster.session())
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"unrelated-{i:05d}", "labels": {"app": "unrelated", "shard": str(i % 50)}},
            "spec": {
                "nodeName": names[i % len(names)],
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "app", "image": "registry.example/unrelated:1"}],
            },
        }
        r = s.post(f"{cluster.base}/api/v1/namespaces/{NAMESPACE}/pods", json=pod, timeout=60)
        r.raise_for_status()

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - t0


def running_pods(cluster: Cluster) -> int:
    items = cluster.session().get(f"{cluster.base}/api/v1/namespaces/{NAMESPACE}/pods", timeout=300).json()["items"]
    return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")


def timeline(cluster: Cluster, name: str, windows: dict[str, float], pods: int, threads: int) -> dict[str, Any]:
    operator = Operator(cluster, REPO / ".bench-artifacts" / f"watch-{name}-operator.log")
    operator.start()
    out: dict[str, Any] = {}
    try:
        wait_for_webhooks(cluster, operator)
        time.sleep(windows["settle"])
        for window in ("before", "during", "after"):
            rss0, cpu0 = proc_usage(operator.pid)
            t0 = time.monotonic()
            if window == "during" and pods:
                out["create_s"] = round(create_pods(cluster, pods, threads), 1)
            remaining = windows[window] - (time.monotonic() - t0)
            if remaining > 0:
                time.sleep(remaining)
            rss1, cpu1 = proc_usage(operator.pid)
            seconds = time.monotonic() - t0
            out[window] = {
                "seconds": round(seconds, 1),
                "cpu_s": round(cpu1 - cpu0, 2),
                "cpu_s_per_s": round((cpu1 - cpu0) / seconds, 4),
                "rss_mib": round(rss1, 1),
            }
            log(f"{name} {window}: {out[window]}")
        if pods:
            out["running_at_end"] = running_pods(cluster)
    finally:
        operator.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--window", type=float, default=60.0, help="seconds of `before` and `after`")
    parser.add_argument("--during", type=float, default=120.0, help="at least this many seconds of `during`")
    args = parser.parse_args(argv)
    cluster = Cluster.up()
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=600s", check=False)
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        cluster.kubectl("delete", kind, "glmops.dev", check=False)
    windows = {"settle": 20.0, "before": args.window, "during": args.during, "after": args.window}
    control = timeline(cluster, "control", windows, 0, args.threads)
    cluster.kubectl("create", "namespace", NAMESPACE)
    with_pods = timeline(cluster, "pods", windows, args.pods, args.threads)
    ratios: dict[str, dict[str, float]] = {}
    met = True
    for window in ("before", "during", "after"):
        c, p = control[window], with_pods[window]
        cpu_ratio = p["cpu_s_per_s"] / max(c["cpu_s_per_s"], 1e-6)
        rss_ratio = p["rss_mib"] / c["rss_mib"]
        ratios[window] = {"cpu_per_s": round(cpu_ratio, 3), "rss": round(rss_ratio, 3)}
        cpu_close = cpu_ratio <= 1.25 or p["cpu_s"] - c["cpu_s"] * p["seconds"] / c["seconds"] < 0.5
        met = met and cpu_close and rss_ratio <= 1.25
    result = {
        "bench": "watch_scale",
        "command": " ".join(["bench/watch_scale.py", *sys.argv[1:]]),
        "pods": args.pods,
        "control": control,
        "with_pods": with_pods,
        "ratios_pods_over_control": ratios,
        "target": "CPU per second and RSS with the pods within 1.25x of control (or < 0.5 CPU s apart)",
        "met": met,
    }
    emit(result)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
