"""The operator as the chart installs it: `helm install`, then a local process that plays the chart's pod.

The admin kubeconfig is used only to install, read the rendered pod spec and the files it mounts, and mint
a token; the operator itself talks to the API server with a real token of the chart's ServiceAccount
(TokenRequest), so every call it makes is judged by the chart's RBAC. Command, arguments and environment come
from the Deployment the chart rendered; what a process on this host cannot do as a pod is changed, and only
that (`HOST_OVERRIDES`):

- listen addresses and ports: the liveness endpoint and the metrics port on free loopback ports;
- the webhook: the chart's Service has no kube-proxy behind it here, so it is turned into an ExternalName for
  the loopback address the process listens on; the chart's webhook configurations, the Service name and the
  certificate the operator keeps in its Secret are used as installed.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import REPO, Cluster, stop_process, wait_for_admission

CHART = REPO / "charts" / "glmops"
RELEASE = "glmops"
# The operator image's ENTRYPOINT (images/operator/Dockerfile): the rendered pod spec carries only args.
IMAGE_ENTRYPOINT = [str(REPO / ".venv" / "bin" / "kopf")]
HOST_OVERRIDES = ("--liveness", "GLMOPS_METRICS_PORT", "GLMOPS_WEBHOOK_SERVICE", "GLMOPS_WEBHOOK_*")
FORBIDDEN = re.compile(r"[Ff]orbidden|\b(?:status=|'code': )403\b")
# A 403 that is no refusal of the operator's rights: a write into a namespace being deleted (another test's).
NOT_A_REFUSAL = "because it is being terminated"
OBJECT_PREFIX = re.compile(r"\] \[([^/\]\s]+)/[^\]]+\] ")  # kopf's per-object log prefix: [namespace/name]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class InstalledOperator:
    """One release of the chart and the process that plays its operator pod."""

    cluster: Cluster
    namespace: str
    workdir: Path
    values: dict[str, Any] = field(default_factory=dict)
    test_env: dict[str, str] = field(default_factory=dict)  # test-only knobs the image would bake in
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    # -- install -------------------------------------------------------------------------------------------
    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.cluster.helm, f"--kubeconfig={self.cluster.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}\n{proc.stdout}")
        return proc

    def install(self) -> None:
        values = self.workdir / "values.yaml"
        values.write_text(yaml.safe_dump(self.values))
        self.helm("install", RELEASE, str(CHART), "--namespace", self.namespace, "-f", str(values))

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--namespace", self.namespace, "--wait", check=False)

    @property
    def service_account(self) -> str:
        return str(self.pod_spec()["serviceAccountName"])

    def pod_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.cluster.kubectl.get("deployment", RELEASE, self.namespace)["spec"]["template"]
        return dict(spec["spec"])

    # -- what the pod would have ----------------------------------------------------------------------------
    def token(self) -> str:
        out = self.cluster.kubectl.run(
            "create", "token", self.service_account, "-n", self.namespace, "--duration=2h"
        ).stdout
        return out.strip()

    def sa_kubeconfig(self) -> Path:
        """A kubeconfig holding only the ServiceAccount's token; its namespace is the pod's, as in-cluster."""
        admin = yaml.safe_load(Path(self.cluster.kubeconfig).read_text())
        server = admin["clusters"][0]["cluster"]["server"]
        ca = base64.b64encode(self.cluster.ca_cert.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority-data": ca}}],
            "users": [{"name": "sa", "user": {"token": self.token()}}],
            "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": self.namespace}}],
            "current-context": "sa",
        }
        path = self.workdir / "sa.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def materialise_mounts(self, pod: dict[str, Any]) -> dict[str, Path]:
        """The container's Secret and ConfigMap volumes written out as the kubelet would; mountPath -> dir."""
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in pod["containers"][0].get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            target = self.workdir / "mounts" / mount["mountPath"].strip("/")
            target.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                obj = self.cluster.kubectl.get("secret", volume["secret"]["secretName"], self.namespace)
                files = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            elif "configMap" in volume:
                obj = self.cluster.kubectl.get("configmap", volume["configMap"]["name"], self.namespace)
                files = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            elif "emptyDir" in volume:
                files = {}  # an empty scratch directory, as the kubelet makes it
            else:
                raise AssertionError(f"the harness cannot play volume {volume}: add it here")
            for key, content in files.items():
                (target / key).write_bytes(content)
            mounts[mount["mountPath"]] = target
        return mounts

    def prepare(self) -> None:
        """The argv and environment of the chart's operator container, as a process on this host."""
        pod = self.pod_spec()
        container = pod["containers"][0]
        mounts = self.materialise_mounts(pod)
        env: dict[str, str] = {}
        for var in container.get("env") or []:
            if "valueFrom" in var:
                raise AssertionError(f"the harness cannot play env {var}: add it here")
            value = str(var.get("value", ""))  # the API server leaves out an empty value
            for mount_path, local in mounts.items():
                if value.startswith(mount_path + "/"):
                    value = str(local / value.removeprefix(mount_path + "/"))
                    assert Path(value).is_file(), f"{var['name']} names {var['value']}, which the pod does not mount"
            env[var["name"]] = value
        liveness = free_port()
        args = [
            f"--liveness=http://127.0.0.1:{liveness}/healthz" if a.startswith("--liveness=") else a
            for a in container.get("args") or []
        ]
        self.argv = [*(container.get("command") or IMAGE_ENTRYPOINT), *args]
        if "GLMOPS_METRICS_PORT" in env:
            env["GLMOPS_METRICS_PORT"] = str(free_port())
        if "GLMOPS_WEBHOOK_SERVICE" in env:
            # The chart's webhook Service becomes an ExternalName for a loopback address this process listens on,
            # on the Service's port: the API server still calls the chart's own webhook configurations through the
            # Service and verifies the certificate the operator keeps in its Secret for `<service>.<ns>.svc`.
            addr = f"127.0.44.{random.randint(2, 250)}"
            ns, _, name = env["GLMOPS_WEBHOOK_SERVICE"].partition("/")
            service = self.cluster.kubectl.get("service", name, ns)
            ports = [{k: p[k] for k in ("name", "port", "protocol") if k in p} for p in service["spec"]["ports"]]
            external = {"type": "ExternalName", "externalName": addr, "ports": ports}
            self.cluster.kubectl.run("delete", "service", name, "-n", ns, "--wait")
            self.cluster.kubectl.apply(
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": external}
            )
            env.update(GLMOPS_WEBHOOK_ADDR=addr, GLMOPS_WEBHOOK_PORT=str(ports[0]["port"]))
            env["GLMOPS_READINESS_PORT"] = str(free_port())
        base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        self.env = {
            **base,
            "PYTHONPATH": f"{REPO / 'operator'}:{REPO}",
            "KUBECONFIG": str(self.sa_kubeconfig()),
            **env,
            **self.test_env,
        }

    # -- run -----------------------------------------------------------------------------------------------
    def start(self, probe_namespace: str) -> None:
        self.prepare()
        self.log_path = self.workdir / "operator.log"
        log = open(self.log_path, "wb")  # noqa: SIM115 (owned by the process)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        if self.env.get("GLMOPS_WEBHOOK") == "off":
            return

        wait_for_admission(
            self.cluster.kubectl, probe_namespace, self._alive, "the installed operator's admission webhooks to answer"
        )

    def _alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"operator exited:\n{self.log()}"

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_process(self.proc)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def refusals(self, namespaces: Collection[str] = ()) -> list[str]:
        """Every log line in which the API server refused the operator something.

        With `namespaces`, lines about objects elsewhere are left out: an all-namespaces operator also serves other
        tests' leftovers in the shared cluster, whose namespaces may be going away under it (a bare `403 Forbidden`).
        Lines about no object (kopf's observers, peering, webhooks, Events) always count.
        """
        found = []
        for line in self.log().splitlines():
            if not FORBIDDEN.search(line) or NOT_A_REFUSAL in line:
                continue
            about = OBJECT_PREFIX.search(line)
            if namespaces and about and about.group(1) not in namespaces:
                continue
            found.append(line)
        return found


def kubectl_as(cluster: Cluster, token: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """kubectl with nothing but `token` for credentials (no kubeconfig, no admin fallback)."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]["server"]
    return subprocess.run(
        [
            cluster.kubectl.binary,
            "--kubeconfig=/dev/null",
            f"--server={server}",
            f"--certificate-authority={cluster.ca_cert}",
            f"--token={token}",
            *args,
        ],
        input=input,
        capture_output=True,
        text=True,
        timeout=30,
    )


def can_i(cluster: Cluster, token: str, verb: str, resource: str, namespace: str = "", **extra: str) -> bool:
    """A real SelfSubjectAccessReview made with `token`: may it `verb` `resource` (`pods/status`, `jobs.batch`)?"""
    name, _, sub = resource.partition("/")
    res, _, api_group = name.partition(".")
    attrs: dict[str, str] = {"verb": verb, "resource": res, "group": api_group, **extra}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    proc = kubectl_as(cluster, token, "create", "-o", "json", "-f", "-", input=json.dumps(review))
    assert proc.returncode == 0, proc.stderr
    return bool(json.loads(proc.stdout)["status"].get("allowed"))
