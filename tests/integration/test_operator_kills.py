"""SIGKILL at random points, 20 times, while GLMDeployments are created and scaled: nothing lost or doubled."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from tests.conftest import OperatorProcess
from tests.support.cluster import REPO, Kubectl, eventually
from tests.support.glmd import owned_objects

pytestmark = pytest.mark.cluster
KILLS = 20
SAMPLES = {
    "baseline-h200-glm53-fp8.yaml": "glm53-fp8-h200-tp8",
    "baseline-gb200-glm53-nvfp4.yaml": "glm53-nvfp4-gb200-tp4",
    "vllm-52833-fixed.yaml": "glm52-mxfp4-mi355x-mtp",
    "vllm-63170-h200-pp8-fixed.yaml": "glm53-fp8-h200-pp8",
}


def _scale(kubectl: Kubectl, namespace: str, name: str, replicas: int) -> bool:
    patch = f'{{"spec":{{"replicas":{replicas}}}}}'
    return kubectl.run("patch", "glmd", name, "-n", namespace, "--type=merge", "-p", patch, check=False).returncode == 0


def test_twenty_kills_at_random_points_leave_every_deployment_whole_and_converged(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    rng = random.Random(20261201)  # the kill points are random but the same on every run
    desired = dict.fromkeys(SAMPLES.values(), 1)
    pending = list(SAMPLES)
    try:
        for kill in range(KILLS):
            operator.stop(kill=True)
            operator.start(wait=False)
            if pending:  # the first kills land while deployments are still being created
                sample = pending.pop()
                applied = kubectl.run("apply", "-n", namespace, "-f", str(REPO / "samples" / sample), check=False)
                if applied.returncode != 0:  # admission is down while the operator starts: try again later
                    pending.append(sample)
            else:  # later ones while they are scaled
                name = rng.choice(sorted(desired))
                if _scale(kubectl, namespace, name, 3 - desired[name]):
                    desired[name] = 3 - desired[name]
            time.sleep(rng.uniform(0.5, 6.0) if kill % 4 else rng.uniform(0.0, 1.5))
    finally:
        operator.stop(kill=True)
        operator.start()  # waits until admission answers again
    for sample in pending:  # creates refused while admission was down (failurePolicy Fail), made now
        kubectl.run("apply", "-n", namespace, "-f", str(REPO / "samples" / sample))

    def converged() -> dict[str, Any]:
        owned = owned_objects(kubectl, namespace)
        for name in SAMPLES.values():
            assert owned.get(name) == {
                "ConfigMap": [f"{name}-canary"],
                "Deployment": [name],
                "Service": [name],
                "PodDisruptionBudget": [name],
            }, owned.get(name)
            glmd = kubectl.get("glmd", name, namespace)
            assert glmd["status"].get("observedGeneration") == glmd["metadata"]["generation"], name
            assert glmd["spec"].get("replicas", 1) == desired[name]
            deploy = kubectl.get("deployment", name, namespace)
            assert deploy["spec"]["replicas"] == desired[name], (name, deploy["spec"]["replicas"])
        return owned

    eventually(converged, timeout=180, what="every deployment whole and converged after the kills")
    sets = [
        r["metadata"]["labels"]["glmops.dev/deployment"]
        for r in kubectl.get("replicasets", namespace=namespace)["items"]
    ]
    assert sorted(sets) == sorted(SAMPLES.values()), "a restart never starts a second rollout"
