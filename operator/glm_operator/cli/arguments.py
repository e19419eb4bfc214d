"""Arguments shared by the commands that read manifests, spelled as kubectl spells them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A namespace name: an RFC 1123 label, as the API server requires."""

IMAGE_POLICY_HELP = (
    "the cluster's image policy, as the operator enforces it: the chart's values file (its imagePolicy) or an "
    "imagePolicy mapping alone (allowCustomImages, allowedRepositories). Default: custom images allowed"
)

ACCESS_POLICY_HELP = (
    "the cluster's limits on pod volumes, ServiceAccounts and canary data, as the operator enforces them: the "
    "chart's values file (its podPolicy and canaryData). Default: the chart's defaults (no hostPath, no projected "
    "ServiceAccount token, no canary URL). The author's own rights (SubjectAccessReviews) are checked at admission only"
)


class _AddSources(argparse.Action):
    """Collects `-f` values and positional files into one list, in the order they were written."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given = [values] if isinstance(values, str) else list(values or [])
        namespace.sources = [*getattr(namespace, "sources", []), *given]


def namespace_name(text: str) -> str:
    if len(text) > 63 or not NAMESPACE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: not a namespace name (lower-case letters, digits and '-', at most 63 characters)"
        )
    return text


def add_manifest_arguments(parser: argparse.ArgumentParser) -> None:
    """`-f FILE|DIR|-` (repeatable), `-R`, the older positional files, `--catalog` and `--image-policy`."""
    parser.add_argument(
        "-f",
        "--filename",
        action=_AddSources,
        dest="sources",
        default=[],
        metavar="FILE|DIR|-",
        help="a manifest file, a directory of .yaml/.yml/.json files (read in name order), or - for standard "
        "input; repeatable",
    )
    parser.add_argument("-R", "--recursive", action="store_true", help="read the subdirectories of -f directories too")
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="FILE",
        help="a catalog extension (accelerators/models/images YAML, as in the glmops-catalog ConfigMap)",
    )
    parser.add_argument("--image-policy", metavar="FILE", help=IMAGE_POLICY_HELP)
    parser.add_argument("--access-policy", metavar="FILE", help=ACCESS_POLICY_HELP)
    parser.add_argument(
        "files", nargs="*", action=_AddSources, default=argparse.SUPPRESS, metavar="FILE", help="as -f FILE"
    )


def manifest_sources(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The sources given, or argparse's usage error (exit 2) when there are none."""
    sources: list[str] = args.sources
    if not sources:
        parser.error("give manifests with -f FILE|DIR|- (repeatable)")
    return sources
