"""Generated GLMDeployments through pure admission: no exception, refusals name a field, repairs are idempotent.

Objects are built from the CRD's own schema (every field, its enums, bounds, lengths and patterns): valid ones,
with catalog values (models, vLLM versions, backends, the environment switches the rules read) where a random
string would never hit one, and hostile ones, the same with one to three fields set to a value at or just past
a bound, of the wrong type, null, or unknown. Hypothesis draws a seed (derandomised, so every run checks the same
10,000 objects, and a failure names its seed) and the walker builds the object from it: drawing each of some
hundred fields through hypothesis strategies cost about 3 ms an object and a minute for the run, the walker
a tenth of a millisecond.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm_operator.api import API_VERSION, KIND
from glm_operator.api.crd import render_crd_yaml
from glm_operator.catalog.bundle import Catalogs
from glm_operator.rules.engine import admit

EXAMPLES = 10_000
CATALOGS = Catalogs.packaged()
SPEC_SCHEMA: dict[str, Any] = yaml.safe_load(render_crd_yaml())["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
    "properties"
]["spec"]
HINTS: dict[str, list[Any]] = {
    "spec.model.name": [*CATALOGS.models.models, "zai-org/GLM-9", "nobody/unknown-model"],
    "spec.model.revision": ["main", "v1.0", "0123abcd"],
    "spec.engine.vllmVersion": [*CATALOGS.images.versions, "0.1.0", "99.0.0"],
    "spec.engine.moeBackend": ["auto", "aiter", "cutlass", "triton", "flashinfer_cutlass", "marlin"],
    "spec.engine.attentionBackend": ["auto", "FLASHMLA", "TRITON_MLA", "ROCM_AITER_MLA"],
    "spec.engine.kvCacheDtype": ["auto", "fp8", "fp8_e4m3", "bfloat16"],
    "spec.engine.all2allBackend": ["auto", "allgather_reducescatter", "deepep_low_latency", "naive"],
    "spec.engine.env[].name": [
        "VLLM_PP_LAYER_PARTITION",
        "VLLM_ROCM_USE_AITER",
        "VLLM_ROCM_USE_AITER_FP4BMM",
        "VLLM_ROCM_USE_AITER_FP8BMM",
        "HF_HUB_OFFLINE",
    ],
    "spec.engine.env[].value": ["1", "0", "true", "True ", "false", "38,40", "18,20,20,20", "1,2", ""],
    # One cache mode each, as people write them (and, rarely, two at once, which is refused).
    "spec.modelCache": [
        {},
        {"sizeLimit": "1Ti"},
        {"sizeLimit": "800Gi"},
        {"persistentVolumeClaim": "glm-weights"},
        {"shared": {"size": "2Ti"}},
        {"shared": {"accessModes": ["ReadWriteMany"], "retain": False, "storageClassName": "nfs"}},
        {"nodeCache": {"path": "/var/lib/glmops/nvme-models"}},
        {"shared": {}, "nodeCache": {}},
    ],
    # Prompt-lookup bounds are refused for methods other than ngram: most valid objects pair them right.
    "spec.engine.speculative": [
        {"method": "mtp", "numSpeculativeTokens": 3},
        {"method": "ngram", "promptLookupMax": 3},
        {"method": "ngram", "numSpeculativeTokens": 2, "promptLookupMin": 2, "promptLookupMax": 4},
        {"method": "eagle", "promptLookupMax": 3},
    ],
    # Without a resource name (and no operator-wide default here) RDMA is refused: most valid objects name one.
    "spec.network.rdma": [
        {"resourceName": "rdma/rdma_shared_device_a"},
        {"resourceName": "nvidia.com/hca", "count": 2},
        {},
    ],
    # Pod settings as platform teams write them: mounts name their volumes, names are distinct.
    "spec.pod.volumes": [[], [{"name": "scratch", "emptyDir": {}}], [{"name": "extra", "configMap": {"name": "x"}}]],
    "spec.pod.volumeMounts": [[], [{"name": "scratch", "mountPath": "/scratch"}]],
    "spec.pod.imagePullSecrets": [[], [{"name": "registry-creds"}]],
    "spec.pod.shmSize": ["16Gi", "64Gi", "1Ti"],
    "spec.network.socketInterface": ["net1", "eth0", "ib0"],
    # Shapes a person would deploy, so that many valid objects are admitted (hostile ones reach the bounds).
    # (Unset, TP1 leaves a GLM-5.x checkpoint on one GPU: refused for memory, as it should be, but a third of
    # every object would be that one refusal).
    "spec.parallelism": [
        {"tensor": 8},
        {"tensor": 8, "pipeline": 2},
        {"tensor": 4, "pipeline": 2, "data": 2},
        {"tensor": 16, "expert": True},
        {"tensor": 8, "data": 8, "expert": True},
        {"tensor": 4, "pipeline": 4},
        {},
    ],
}
WRONG_TYPES: list[Any] = [None, "", "x", -1, 1.5, True, [], {}, [1], {"a": 1}, "1" * 300]


def valid_value(rng: random.Random, schema: dict[str, Any], path: str) -> Any:
    """A value the schema allows (catalog values where the rules need real ones), optional fields half the time."""
    kind = schema.get("type")
    if path in HINTS:
        return copy.deepcopy(rng.choice(HINTS[path]))  # a hinted object must not be filled by a later corruption
    if kind == "object":
        required = set(schema.get("required") or [])
        return {
            key: valid_value(rng, sub, f"{path}.{key}")
            for key, sub in (schema.get("properties") or {}).items()
            if key in required or rng.random() < 0.4
        }
    if kind == "array":
        count = rng.choice([0, 1, 1, 2, 3])
        return [valid_value(rng, schema["items"], f"{path}[]") for _ in range(min(count, schema.get("maxItems", 3)))]
    if kind == "boolean":
        return rng.random() < 0.5
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 0), schema.get("maximum", 10**6)
        near = [low, high, (low + high) // 2] if kind == "integer" else [low, high, (low + high) / 2, 0.5 * high]
        return rng.choice(near)
    low, high = schema.get("minLength", 1), schema.get("maxLength", 64)
    return rng.choice(["a" * max(low, 1), "name-1", "a" * min(high, 253)])


def hostile_values(schema: dict[str, Any]) -> list[Any]:
    """Values at and just past the field's bounds, outside its enum, or of the wrong type."""
    kind = schema.get("type")
    out = list(WRONG_TYPES)
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        out += [b for b in (low, high) if b is not None]
        out += [low - 1] if low is not None else []
        out += [high + 1] if high is not None else []
        out += [10**30, -(2**63)] + ([float("nan"), float("inf"), -0.0] if kind == "number" else [])
    elif kind == "string":
        high = schema.get("maxLength", 64)
        out += ["a" * high, "a" * (high + 1), " leading", "bad value!", "ü/ü", "\x00", "a\nb"]
        out += [e.lower() for e in schema.get("enum", [])] + ["Bogus"]
    elif kind == "array":
        out += [[None] * (schema.get("maxItems", 4) + 1)]
    return out


def leaf_paths(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every field of the schema with its own schema, objects included (an object can be nulled too)."""
    out = [(path, schema)]
    for key, sub in (schema.get("properties") or {}).items():
        out += leaf_paths(sub, f"{path}.{key}")
    return out


FIELDS = leaf_paths(SPEC_SCHEMA, "spec")[1:]


def corrupt(rng: random.Random, obj: dict[str, Any]) -> list[str]:
    """Set one to three fields to hostile values (or add an unknown one); returns the paths set."""
    paths = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        path, schema = rng.choice(FIELDS)
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if rng.random() < 0.05:
            node[f"unknown{leaf.capitalize()}"] = 1
        else:
            # A copy: the wrong-type values are shared, and a later path may descend into one and fill it.
            node[leaf] = copy.deepcopy(rng.choice(hostile_values(schema)))
        paths.append(path)
    return paths


def build(rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "generated", "namespace": "default"},
        "spec": valid_value(rng, SPEC_SCHEMA, "spec"),
    }
    if rng.random() < 0.5:
        return obj, []
    if rng.random() < 0.03:
        obj["metadata"] = copy.deepcopy(rng.choice(WRONG_TYPES))
        return obj, ["metadata"]
    return obj, corrupt(rng, obj)


SEEN: dict[str, int] = {"admitted": 0, "repaired": 0, "refused": 0}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(0, 2**64))
def test_generated_glmdeployments_are_decided_without_exception_and_repairs_hold(seed: int) -> None:
    obj, _ = build(random.Random(seed))
    before = copy.deepcopy(obj)
    result = admit(obj, CATALOGS)
    shown = json.dumps(obj, default=str)
    assert obj == before or shown == json.dumps(before, default=str), "admission does not change its input"
    if not result.allowed:
        SEEN["refused"] += 1
        assert result.errors, f"a refusal has at least one error: {shown}"
        for finding in result.errors:
            assert finding.field.split(".")[0] in {"spec", "metadata"}, f"{finding.message} for {shown}"
            assert finding.message.startswith(f"{finding.field}: ")
        return
    SEEN["repaired" if result.changes else "admitted"] += 1
    again = admit(result.patched, CATALOGS)
    assert again.allowed, f"{again.rejection()} after repairing {shown}"
    assert not again.changes, f"repairs are not idempotent: {again.changes} for {shown}"
    assert again.patched == result.patched


def test_the_generated_objects_cover_admitted_repaired_and_refused() -> None:
    """Runs after the property test (file order): a generator that only ever produced refusals proves little."""
    if sum(SEEN.values()) < EXAMPLES:  # the property test was deselected
        return
    assert all(count >= EXAMPLES // 50 for count in SEEN.values()), SEEN
