"""GSM8K questions for a GLMDeployment's canary: its source (path, URL, ConfigMap), or generated ones."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx

from glm_operator.canary.gsm8k_data import Item, generate, parse_jsonl
from glm_operator.k8s.client import core_v1

GENERATED = (generate(200, seed=1), generate(5, seed=2))


@lru_cache(maxsize=16)
def _from_path(path: str) -> tuple[list[Item], list[Item]]:
    questions = parse_jsonl(Path(path).read_text())
    train = Path(path).with_name("train.jsonl")
    return questions, parse_jsonl(train.read_text())[:5] if train.is_file() else GENERATED[1]


@lru_cache(maxsize=16)
def _from_url(url: str) -> list[Item]:
    return parse_jsonl(httpx.get(url, timeout=60, follow_redirects=True).raise_for_status().text)


def gsm8k_for(body: dict[str, Any]) -> tuple[list[Item], list[Item]]:
    """Questions and few-shot examples; the operator-wide GLMOPS_GSM8K_PATH is the default source."""
    source = ((((body.get("spec") or {}).get("canary") or {}).get("gsm8k") or {}).get("source")) or {}
    if source.get("path"):
        return _from_path(source["path"])
    if source.get("url"):
        return _from_url(source["url"]), GENERATED[1]
    if source.get("configMap"):
        cm = core_v1().read_namespaced_config_map(source["configMap"], body["metadata"]["namespace"])
        return parse_jsonl((cm.data or {})["test.jsonl"]), GENERATED[1]
    default = os.environ.get("GLMOPS_GSM8K_PATH")
    if default and Path(default).is_file():
        return _from_path(default)
    return GENERATED
