"""hack/dashboard_picture.py, the command that draws docs/images/dashboard.png: it draws every panel the shipped
dashboard has, sends each query as Grafana would, and scrapes the operator where the demo serves its metrics."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.promql import parse

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def picture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard_picture", REPO / "hack" / "dashboard_picture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _leaf_panels(items: list[dict]) -> list[dict]:
    out = []
    for item in items:
        out += _leaf_panels(item.get("panels") or []) if item.get("type") == "row" else [item]
    return out


def test_every_panel_of_the_shipped_dashboard_is_drawn_with_all_its_queries(picture: ModuleType) -> None:
    dashboard = json.loads(picture.DASHBOARD.read_text())
    leaves = _leaf_panels(dashboard["panels"])
    drawn = picture.panels(dashboard)
    assert [p.title for p in drawn] == [p["title"] for p in leaves]
    assert [len(p.queries) for p in drawn] == [len(p["targets"]) for p in leaves]
    for panel in drawn:
        for expr, _ in panel.queries:
            parse(expr)


def test_a_panel_nested_in_a_collapsed_row_is_drawn_too(picture: ModuleType) -> None:
    nested = {"type": "row", "panels": [{"type": "stat", "title": "t", "targets": [{"expr": "up"}]}]}
    assert [p.title for p in picture.panels({"panels": [nested, {"type": "text", "title": "no queries"}]})] == ["t"]


def test_legends_follow_grafana_s_format_or_name_the_labels(picture: ModuleType) -> None:
    metric = {"__name__": "x", "pod": "p-0", "check": "gsm8k"}
    assert picture.legend("{{pod}} {{ check }}", metric) == "p-0 gsm8k"
    assert picture.legend("", metric) == "check=gsm8k,pod=p-0"


def test_it_scrapes_the_operator_where_the_demo_serves_its_metrics(picture: ModuleType) -> None:
    port = picture.OPERATOR_METRICS.rsplit(":", 1)[1]
    demo = (REPO / "hack" / "demo.sh").read_text()
    assert re.search(rf"GLMOPS_METRICS_PORT={port}\b", demo), f"hack/demo.sh does not serve metrics on {port}"
