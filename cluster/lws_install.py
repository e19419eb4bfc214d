"""The LeaderWorkerSet release install (`kubectl kustomize <module>/config/default`), adapted to controller-as-process.

Reads the kustomize output on stdin and writes, into the directory given:
- install.yaml: every object of the release but the controller's Deployment (the controller runs as a local process,
  like the control plane's daemons), with its two Services turned into ExternalName Services pointing at the loopback
  address it listens on: the API server resolves a webhook Service of that type to its external name (there is no
  kube-proxy here) and still verifies the certificate for `lws-webhook-service.lws-system.svc`.
- config.yaml: the release's controller configuration (config/manager/controller_manager_config.yaml) with the
  listen addresses and certificate directory a process on this machine needs; internal certificate management
  (cert-controller) stays on, as the release ships it.

Usage: lws_install.py OUT_DIR MODULE_DIR ADDR < kustomize-output.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

WEBHOOK_PORT = 443  # the webhook Service's port: with an ExternalName Service the API server dials this port
METRICS_PORT = 8443
HEALTH_PORT = 8081


def install(docs: list[dict[str, Any]], addr: str) -> list[dict[str, Any]]:
    out = []
    for obj in docs:
        if obj["kind"] == "Deployment":
            continue
        if obj["kind"] == "Service":
            ports = [{k: v for k, v in p.items() if k != "targetPort"} for p in obj["spec"]["ports"]]
            obj["spec"] = {"type": "ExternalName", "externalName": addr, "ports": ports}
        out.append(obj)
    return out


def config(module: Path, out: Path, addr: str) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load((module / "config" / "manager" / "controller_manager_config.yaml").read_text())
    # One controller per cluster here: no second replica to hand over to, so no lease to wait for after a restart.
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["webhook"] = {"host": addr, "port": WEBHOOK_PORT, "certDir": str(out / "certs")}
    cfg["metrics"] = {"bindAddress": f"{addr}:{METRICS_PORT}"}
    cfg["health"] = {"healthProbeBindAddress": f"{addr}:{HEALTH_PORT}"}
    return cfg


def main() -> None:
    out, module, addr = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    out.mkdir(parents=True, exist_ok=True)
    (out / "install.yaml").write_text(yaml.safe_dump_all(install(docs, addr), sort_keys=False))
    (out / "config.yaml").write_text(yaml.safe_dump(config(module, out, addr), sort_keys=False))


if __name__ == "__main__":
    main()
