"""Shared pieces of the control-plane benchmarks: a cluster of their own, the operator as `kopf run`, and meters.

The benchmarks run against their own local control plane (`glmops-bench`, its own ports), never the test
cluster; `cluster/up.sh` starts it (reused when running) and `cluster/down.sh` with the same variables stops it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3
from tests.support.cluster import wait_established

REPO = Path(__file__).resolve().parents[1]
BENCH_CLUSTER_ENV = {
    "GLMOPS_CLUSTER": "glmops-bench",
    "GLMOPS_APISERVER_PORT": "18443",
    "GLMOPS_ETCD_PORT": "14379",
    "GLMOPS_KCM_PORT": "22257",
    "GLMOPS_SCHEDULER_PORT": "22259",
    "GLMOPS_KWOK_PORT": "22247",
    "GLMOPS_POD_CIDR": "127.22.0.0/16",
}
WEBHOOK_PORT = os.environ.get("GLMOPS_BENCH_WEBHOOK_PORT", "19643")
METRICS_PORT = os.environ.get("GLMOPS_BENCH_METRICS_PORT", "19644")
GROUP_PATH = "/apis/glmops.dev/v1alpha1"


def cluster_env() -> dict[str, str]:
    env = dict(os.environ)
    for key, value in BENCH_CLUSTER_ENV.items():
        env.setdefault(key, value)
    return env


def log(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


@dataclass
class Cluster:
    """The benchmark's control plane: kubectl, a raw HTTPS session with the admin certificate, and its metrics."""

    kubeconfig: str
    state: Path
    bin_dir: Path
    port: str = field(default_factory=lambda: cluster_env()["GLMOPS_APISERVER_PORT"])

    @classmethod
    def up(cls) -> Cluster:
        out = subprocess.run(
            [str(REPO / "cluster" / "up.sh")], env=cluster_env(), capture_output=True, text=True, check=True
        ).stdout
        kubeconfig = out.strip().splitlines()[-1].removeprefix("export KUBECONFIG=")
        bin_dir = subprocess.run(
            [str(REPO / "cluster" / "build.sh")], env=cluster_env(), capture_output=True, text=True, check=True
        ).stdout
        cluster = cls(kubeconfig, Path(kubeconfig).parent, Path(bin_dir.strip().splitlines()[-1]))
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        wait_established(lambda *a: cluster.kubectl(*a, check=False).stdout, ["glmdeployments.glmops.dev"])
        return cluster

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def session(self) -> requests.Session:
        certs = self.state / "certs"
        s = requests.Session()
        s.cert = (str(certs / "admin.crt"), str(certs / "admin.key"))
        s.verify = str(certs / "ca.crt")
        s.trust_env = False  # REQUESTS_CA_BUNDLE would otherwise replace our CA
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
        s.mount("https://", adapter)
        return s

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    def request_counts(self) -> dict[tuple[str, str, str], float]:
        """apiserver_request_total summed by (verb, group, resource), from the API server's /metrics."""
        text = self.session().get(f"{self.base}/metrics", timeout=30).text
        counts: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line.rpartition(" ")
            labels = dict(
                part.split("=", 1) for part in labels_text[len("apiserver_request_total{") : -1].split('",') if part
            )
            labels = {k: v.strip('"') for k, v in labels.items()}
            key = (labels.get("verb", ""), labels.get("group", ""), labels.get("resource", ""))
            counts[key] = counts.get(key, 0.0) + float(value)
        return counts


def counts_delta(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]
) -> dict[tuple[str, str, str], float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Operator:
    """The operator as users run it outside a cluster: `kopf run` on our handlers, its own webhook port."""

    def __init__(
        self,
        cluster: Cluster,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
        probe: Path | None = None,
        count_requests: Path | None = None,
    ) -> None:
        certs = cluster.state / "certs"
        # GLMOPS_BENCH_OPERATOR_TREE: another checkout's operator/ (e.g. `git worktree add DIR REV`), for a before and
        # after of the same benchmark in one session.
        pythonpath = f"{os.environ.get('GLMOPS_BENCH_OPERATOR_TREE') or REPO / 'operator'}:{REPO}"
        counting: dict[str, str] = {}
        if count_requests is not None:  # its own API requests, counted inside it (bench/request_count.py)
            from bench.request_count import install_into

            folder = install_into(log_path.parent / "request-count-site")
            pythonpath = f"{folder}:{pythonpath}"
            count_requests.unlink(missing_ok=True)
            counting["GLMOPS_BENCH_REQUEST_COUNT"] = str(count_requests)
        self.count_requests = count_requests
        self.env = dict(
            os.environ,
            KUBECONFIG=cluster.kubeconfig,
            PYTHONPATH=pythonpath,
            **counting,
            GLMOPS_WEBHOOK_ADDR="127.0.0.1",
            GLMOPS_WEBHOOK_HOST="127.0.0.1",
            GLMOPS_WEBHOOK_PORT=WEBHOOK_PORT,
            GLMOPS_WEBHOOK_CERT=str(certs / "webhook.crt"),
            GLMOPS_WEBHOOK_KEY=str(certs / "webhook.key"),
            GLMOPS_WEBHOOK_CA=str(certs / "ca.crt"),
            GLMOPS_METRICS_PORT=METRICS_PORT,
            **(extra_env or {}),
        )
        self.log_path = log_path
        self.probe = probe  # run under bench/memory_probe.py, writing its samples here
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "wb")  # noqa: SIM115 (owned by the process)
        argv = [str(REPO / ".venv" / "bin" / "kopf"), "run", "--standalone", "--all-namespaces"]
        if self.probe is not None:
            argv = [str(REPO / ".venv" / "bin" / "python"), str(REPO / "bench" / "memory_probe.py"), str(self.probe)]
            argv += ["run", "--standalone", "--all-namespaces"]
        self.proc = subprocess.Popen(
            [*argv, "-m", "glm_operator.handlers"], env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def proc_usage(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds user+system) of one process, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss_kib / 1024, (int(fields[11]) + int(fields[12])) / ticks


class Sampler:
    """Samples a process's RSS and CPU every `interval` seconds in a thread; keeps the peak and the series."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = 0.0
        self.samples: list[tuple[float, float, float]] = []  # (monotonic time, rss MiB, cpu s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss, cpu = proc_usage(self.pid)
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                return
            self.peak_rss = max(self.peak_rss, rss)
            self.samples.append((time.monotonic(), rss, cpu))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def quiet_tls() -> Iterator[None]:
    urllib3.disable_warnings()
    yield


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2, sort_keys=False))
