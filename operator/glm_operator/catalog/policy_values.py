"""Reading a cluster policy the way the chart hands it over: JSON in an environment variable, or a values file.

The image policy and the access policy are both set once by the cluster's administrator in the chart's values;
the operator gets them as JSON in an environment variable, `glmctl` reads the values file itself. Both readers
raise the policy's own error type, with the variable or file named, so a malformed policy says where it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml


def env_json(env: Mapping[str, str], name: str, error: type[Exception]) -> Any | None:
    """The JSON in `env[name]`, or None where it is unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise error(f"{name}: not JSON: {err}") from err


def values_yaml(text: str, source: str, error: type[Exception]) -> Any:
    """A values file's YAML (an empty file is an empty mapping)."""
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML: {err}") from err
