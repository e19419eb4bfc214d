"""The real local control plane for tests: start it once (or reuse it), and drive it with kubectl."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def pinned_helm() -> Path:
    """Where cluster/build.sh puts the helm of cluster/versions.env (it may not be built yet)."""
    pins = dict(
        re.findall(r"^(\w+_VERSION)=(\S+)", (REPO / "cluster" / "versions.env").read_text(), flags=re.MULTILINE)
    )
    cache = os.environ.get("GLMOPS_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glmops"
    )
    key = (
        f"k8s-{pins['KUBERNETES_VERSION']}_etcd-{pins['ETCD_VERSION']}"
        f"_kwok-{pins['KWOK_VERSION']}_helm-{pins['HELM_VERSION']}"
    )
    return Path(cache) / "bin" / key / "helm"


CLUSTER_DIR = REPO / "cluster"

# Tests get their own cluster (own ports and state), so `make demo` can run beside them.
TEST_CLUSTER_ENV = {
    "GLMOPS_CLUSTER": "glmops-test",
    "GLMOPS_APISERVER_PORT": "17443",
    "GLMOPS_ETCD_PORT": "13379",
    "GLMOPS_KCM_PORT": "21257",
    "GLMOPS_SCHEDULER_PORT": "21259",
    "GLMOPS_KWOK_PORT": "21247",
    "GLMOPS_POD_CIDR": "127.21.0.0/16",
    "GLMOPS_LWS_ADDR": "127.0.45.2",
}


def script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in TEST_CLUSTER_ENV.items():
        env.setdefault(key, value)
    env.update(extra or {})
    return env


def run_script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    """Run cluster/<name> and return its stdout; raise with its stderr on failure."""
    proc = subprocess.run(
        [str(CLUSTER_DIR / name), *args], env=env or script_env(), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cluster/{name} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    return proc.stdout


ESTABLISHED = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'


def wait_established(kubectl: Callable[..., str], crds: tuple[str, ...] | list[str], timeout: float = 60) -> None:
    """Wait for each CRD's Established condition; `kubectl` runs kubectl with the given arguments and returns its
    stdout. Not `kubectl wait --for=condition=Established`: a CRD just created has `status.conditions: null` (the
    field has no omitempty), on which kubectl wait fails at once instead of waiting (cluster/lib.sh says the same)."""
    deadline = time.monotonic() + timeout
    for crd in crds:
        while kubectl("get", f"crd/{crd}", "-o", ESTABLISHED).strip() != "True":
            if time.monotonic() > deadline:
                raise AssertionError(f"CRD {crd} is not Established after {timeout:.0f} s")
            time.sleep(0.2)


@dataclass
class Kubectl:
    binary: str
    kubeconfig: str

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        wait_established(lambda *a: self.run(*a, check=False).stdout, crds, timeout)

    def apply(self, obj: dict[str, Any] | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        text = obj if isinstance(obj, str) else yaml.safe_dump(obj)
        return self.run("apply", "-f", "-", *args, input=text, check=check)

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result: dict[str, Any] = json.loads(self.run(*args).stdout)
        return result


@dataclass
class Cluster:
    bin_dir: Path
    state_dir: Path
    kubeconfig: str
    kubectl: Kubectl

    @property
    def helm(self) -> str:
        return str(self.bin_dir / "helm")

    @property
    def ca_cert(self) -> Path:
        return self.state_dir / "certs" / "ca.crt"

    @property
    def webhook_client_ca(self) -> Path:
        """The CA of the client certificate the API server presents to admission webhooks (cluster/certs.sh)."""
        return self.state_dir / "certs" / "webhook-client-ca.crt"


def eventually(check: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = "") -> Any:
    """Retry `check` until it returns a truthy value without raising; fail with its last error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = None
        except (AssertionError, KeyError, IndexError, StopIteration) as err:  # "not there yet"
            last = err
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: {last}")


# A GLMDeployment the rules refuse (expert parallelism over a single rank): once the API server refuses it through
# the validating webhook, admission is live end to end.
ADMISSION_PROBE = (
    "apiVersion: glmops.dev/v1alpha1\nkind: GLMDeployment\nmetadata: {{name: probe, namespace: {ns}}}\n"
    "spec: {{model: {{name: zai-org/GLM-5.3}}, accelerator: {{type: H200}}, parallelism: {{expert: true}}}}\n"
)


def wait_for_admission(kubectl: Kubectl, namespace: str, alive: Callable[[], None], what: str) -> None:
    """Until the API server refuses the probe through glmops' validating webhook; `alive` asserts the server runs."""

    def answers() -> bool:
        alive()
        out = kubectl.run(
            "apply", "--dry-run=server", "-f", "-", input=ADMISSION_PROBE.format(ns=namespace), check=False
        )
        assert "glmops-validate.glmops.dev" in out.stderr, out.stderr or out.stdout
        return True

    eventually(answers, timeout=90, what=what)


def stop_process(proc: subprocess.Popen[bytes], kill: bool = False) -> None:
    """SIGTERM (or SIGKILL), then SIGKILL after 20 s; waits until it is gone."""
    if kill:
        proc.kill()
    else:
        proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
