"""Static provisioning for tests: the local cluster has no storage provisioner, so a test that needs a claim bound
makes the PersistentVolume itself, pre-bound to the claim's name, as an administrator would."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.cluster import Kubectl


@contextmanager
def prebound_volume(kubectl: Kubectl, namespace: str, claim: str) -> Iterator[str]:
    """A 2Ti ReadWriteMany hostPath volume bound to `namespace/claim` for the block, deleted after; yields its name."""
    name = f"pv-{namespace}"[:63]
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"glmops.dev/test": "true"}},
            "spec": {
                "capacity": {"storage": "2Ti"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": f"/tmp/glmops-test-models/{namespace}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    try:
        yield name
    finally:
        kubectl.run("delete", "pv", name, "--ignore-not-found", "--wait=false", check=False)
