"""`glmctl doctor`: what a cluster lacks for glmops, before and after installing it, each with its fix.

The snapshot comes from `k8s/doctor.py` (or, in tests, any callable that returns one); the checks are
`glm_operator.doctor`'s. Exit 0 when nothing is missing (warnings allowed), 1 when a check found a problem, 2 when
the cluster cannot be asked.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from glm_operator.catalog import AcceleratorCatalog, load_accelerators
from glm_operator.cli.arguments import namespace_name
from glm_operator.doctor.checks import diagnose, exit_code
from glm_operator.doctor.facts import Finding, Level, Options, Snapshot

EXIT_UNREACHABLE = 2
DESCRIPTION = (
    "Check a cluster for what glmops needs: the Kubernetes version, GPU nodes with their labels and allocatable GPUs, "
    "LeaderWorkerSet (--multi-node), the prometheus-operator CRDs (--monitoring), a default StorageClass, and once "
    "the chart is installed its CRDs, webhooks, certificate and the operator's permissions. Exit 0 when nothing is "
    "missing (warnings allowed), 1 when a problem is found, 2 when the cluster cannot be reached or for bad input."
)
Gather = Callable[[Options, AcceleratorCatalog, str | None, str | None], Snapshot]
MARKS = {Level.OK: "ok", Level.WARNING: "warning", Level.PROBLEM: "PROBLEM"}


def add_doctor(sub: Any, func: Callable[[argparse.Namespace], int]) -> None:
    doc = sub.add_parser("doctor", help="check a cluster for what glmops needs, with the fix for each gap",
                         description=DESCRIPTION)  # fmt: skip
    doc.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    doc.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    doc.add_argument(
        "-n",
        "--namespace",
        type=namespace_name,
        default=Options.namespace,
        help=f"the operator's namespace (default: {Options.namespace})",
    )
    doc.add_argument("--release", default=Options.release, help=f"the Helm release (default: {Options.release})")
    doc.add_argument("--multi-node", action="store_true", help="require LeaderWorkerSet (replicas spanning nodes)")
    doc.add_argument("--monitoring", action="store_true", help="require the prometheus-operator CRDs")
    doc.add_argument("-o", "--output", choices=["text", "json"], default="text")
    doc.set_defaults(func=func)


def _text(findings: list[Finding]) -> str:
    width = max(len(m) for m in MARKS.values())
    lines = [f"{MARKS[f.level]:<{width}}  {f.check}: {f.message}" for f in findings]
    problems = sum(f.level is Level.PROBLEM for f in findings)
    warnings = sum(f.level is Level.WARNING for f in findings)
    lines.append(f"{problems} problems, {warnings} warnings")
    return "\n".join(lines) + "\n"


def _json(findings: list[Finding]) -> str:
    rows = [
        {
            "check": f.check,
            "level": f.level.value,
            "subject": f.subject,
            "value": f.value,
            "detail": f.detail,
            "fix": f.fix,
            "message": f.message,
        }
        for f in findings
    ]
    summary = {
        "problems": sum(f.level is Level.PROBLEM for f in findings),
        "warnings": sum(f.level is Level.WARNING for f in findings),
    }
    return json.dumps({"findings": rows, **summary}, indent=2) + "\n"


def doctor(args: argparse.Namespace, gather: Gather | None = None) -> int:
    opts = Options(args.namespace, args.release, args.multi_node, args.monitoring)
    catalog = load_accelerators()
    # Imported here: the Kubernetes client takes a while to import, and the offline commands never need it.
    from glm_operator.k8s.doctor import ClusterUnreachable
    from glm_operator.k8s.doctor import gather as gather_from_cluster

    try:
        snapshot = (gather or gather_from_cluster)(opts, catalog, args.kubeconfig, args.context)
    except ClusterUnreachable as err:
        print(f"{err}. Check --kubeconfig and --context, and that the API server answers.", file=sys.stderr)
        return EXIT_UNREACHABLE
    findings = diagnose(snapshot, opts, catalog)
    sys.stdout.write(_json(findings) if args.output == "json" else _text(findings))
    return exit_code(findings)
