"""PromQL as Grafana sends it, parsed by real parsers: promql-parser (a port of Prometheus' grammar, for the syntax
tree and so the metric names) and Prometheus' own through `promtool check rules` (Debian's `prometheus` package).

Grafana substitutes its variables before the query reaches Prometheus: `$__rate_interval` becomes a duration, and
a multi-valued variable with All selected becomes its all value (`.*` on glmops' dashboard). `as_sent` does the same.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import promql_parser
import yaml

INTERVALS = {"$__rate_interval": "2m", "$__interval": "30s", "$__range": "6h"}
EQUAL = promql_parser.MatchOp.Equal
_VARIABLE = re.compile(r"\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$", re.S)


def as_sent(expr: str, all_value: str = ".*", rate_interval: str = INTERVALS["$__rate_interval"]) -> str:
    """The query as Prometheus gets it from Grafana: intervals as durations, template variables at their All value.
    `$__rate_interval` is at least four scrape intervals in Grafana: 2m for a 30 s scrape."""
    for name, duration in (INTERVALS | {"$__rate_interval": rate_interval}).items():
        expr = expr.replace(name, duration)
    return _VARIABLE.sub(all_value, expr)


def parse(expr: str) -> promql_parser.Expr:
    """The syntax tree of a query as Grafana sends it; ValueError with the parser's message when it is not PromQL."""
    try:
        return promql_parser.parse(as_sent(expr))
    except ValueError as err:
        raise ValueError(f"{err}: {expr!r}") from err


def metric_names(expr: str) -> set[str]:
    """Every metric name a query selects. A selector without a literal name (none, or a regex on __name__) is
    refused: such a query could name anything, and no check of names would mean something."""
    names: set[str] = set()
    unnamed: list[str] = []

    def visit(node: promql_parser.Expr) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            literal = [m.value for m in node.matchers.matchers if m.name == "__name__" and m.op == EQUAL]
            if node.name or literal:
                names.add(node.name or literal[0])
            else:
                unnamed.append(str(node))
        return True

    promql_parser.walk(parse(expr), visit)
    if unnamed:
        raise ValueError(f"{expr!r}: selectors without a metric name: {unnamed}")
    return names


def label_values_selector(query: str) -> tuple[str, str]:
    """(selector, label) of a Grafana `label_values(<selector>, <label>)` variable query."""
    match = _LABEL_VALUES.match(query.strip())
    if match is None:
        raise ValueError(f"not a label_values(<selector>, <label>) query: {query!r}")
    return match["selector"], match["label"]


def promtool_rejections(exprs: Iterable[str], workdir: Path) -> str | None:
    """Prometheus' own parser on every query (as recording rules `promtool check rules` reads): None when it accepts
    them all, else its complaint. Raises LookupError when promtool is not installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise LookupError("promtool is not installed (Debian package prometheus; hack/system-deps.sh)")
    rules = [{"record": f"dashboard:query_{i}:check", "expr": as_sent(e)} for i, e in enumerate(exprs)]
    path = workdir / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    return None if proc.returncode == 0 else proc.stdout + proc.stderr
