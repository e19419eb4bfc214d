"""GSM8K questions for a GLMDeployment's canary: its ConfigMap, an allowed URL, or generated ones.

The operator reads no file a user names (spec.canary.gsm8k.source.path is refused at admission and never read
here) and fetches a URL only within the cluster's canaryData limits (canary/fetch.py). The operator-wide default,
GLMOPS_GSM8K_PATH, is the administrator's setting, not a user's.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from glm_operator.api.v1alpha1 import GSM8KSource
from glm_operator.canary.fetch import FetchRefused, fetch
from glm_operator.canary.gsm8k_data import Item, generate, parse_jsonl
from glm_operator.catalog.access_policy import AccessPolicy
from glm_operator.k8s.client import core_v1

GENERATED = (generate(200, seed=1), generate(5, seed=2))


@lru_cache(maxsize=16)
def _from_path(path: str) -> tuple[list[Item], list[Item]]:
    questions = parse_jsonl(Path(path).read_text())
    train = Path(path).with_name("train.jsonl")
    return questions, parse_jsonl(train.read_text())[:5] if train.is_file() else GENERATED[1]


@lru_cache(maxsize=16)
def _from_url(url: str, policy: AccessPolicy) -> list[Item]:
    body = fetch(url, policy)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FetchRefused(f"{url}: not UTF-8 text") from err
    return parse_jsonl(text)


def gsm8k_for(
    source: GSM8KSource, namespace: str, policy: AccessPolicy, default_path: str | None = None
) -> tuple[list[Item], list[Item]]:
    """Questions and few-shot examples of a deployment in `namespace` whose spec.canary.gsm8k.source is `source`.

    The operator-wide file (GLMOPS_GSM8K_PATH, `default_path`) is the default.
    """
    if source.path:
        raise FetchRefused(
            "spec.canary.gsm8k.source.path: the operator reads no file a GLMDeployment names; "
            "use spec.canary.gsm8k.source.configMap"
        )
    if source.url:
        return _from_url(source.url, policy), GENERATED[1]
    if source.config_map:
        cm = core_v1().read_namespaced_config_map(source.config_map, namespace)
        return parse_jsonl((cm.data or {})["test.jsonl"]), GENERATED[1]
    if default_path and Path(default_path).is_file():
        return _from_path(default_path)
    return GENERATED
