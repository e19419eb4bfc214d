"""glmctl entry point: one subcommand per job, each a thin shell over pure code.

`glmctl --help` lists what a user of the operator runs; the developer and test commands
(`cli/dev_commands.py`) work as before and are listed by `glmctl help dev`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from glm_operator import __version__
from glm_operator.canary.suite import SUITES
from glm_operator.cli.arguments import add_manifest_arguments, manifest_sources, namespace_name
from glm_operator.cli.canary_cmd import canary
from glm_operator.cli.dev_commands import DEV_COMMANDS, add_dev_commands
from glm_operator.cli.doctor import add_doctor, doctor
from glm_operator.cli.output import OBJECT_FORMATS
from glm_operator.cli.render import render
from glm_operator.cli.validate import REPORT_FORMATS, validate

EPILOG = "Developer and test commands (crd, generate, fleet, sim, sim-fleet) are listed by `glmctl help dev`."

VALIDATE_DESCRIPTION = (
    "Exit 0 when every object is admitted (maybe repaired or with warnings), 1 when any is refused, 2 for bad "
    "input: unreadable, not YAML, over 16 MiB (64 MiB for all files together) or expanded by YAML aliases beyond "
    "100000 values, a file named without any GLMDeployment, or a directory with none in any of its files. "
    "Objects of other kinds (a Service, a ConfigMap) are skipped with a note on stderr; the items of a `kind: "
    "List` are read. Values in messages are cut at 200 characters. Exit 141 when the reader of the output leaves "
    "before all of it is written (as `| head` on output longer than the pipe holds)."
)

RENDER_DESCRIPTION = (
    "Exit 0 with the objects on stdout, 1 when admission refuses an object, 2 for bad input (as for validate: "
    "other kinds are skipped with a note, a file without any GLMDeployment is bad input) and for a manifest "
    "whose namespace is not the one given with -n."
)


def _cmd_validate(args: argparse.Namespace) -> int:
    sources = manifest_sources(args.usage_parser, args)
    return validate(
        sources,
        args.output,
        args.catalog,
        image_policy_file=args.image_policy,
        recursive=args.recursive,
        access_policy_file=args.access_policy,
    )


def _cmd_render(args: argparse.Namespace) -> int:
    return render(
        manifest_sources(args.usage_parser, args),
        args.lws,
        args.catalog,
        image_policy_file=args.image_policy,
        recursive=args.recursive,
        output=args.output,
        namespace=args.namespace,
        access_policy_file=args.access_policy,
    )


def _cmd_canary(args: argparse.Namespace) -> int:
    return canary(
        args.url,
        args.suite,
        args.gsm8k,
        args.output,
        args.model,
        args.max_questions,
        args.concurrency,
        args.logprob_reference,
        args.timeout,
    )


def _cmd_doctor(args: argparse.Namespace) -> int:
    return doctor(args)


def _cmd_version(_: argparse.Namespace) -> int:
    print(f"glmctl {__version__}")
    return 0


def _concurrency(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"{value}: must be between 1 and 256")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glmctl", description="glmops: GLM-5.x on vLLM, checked before it serves.", epilog=EPILOG
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _add_validate(sub)
    _add_render(sub)
    _add_canary(sub)
    add_doctor(sub, _cmd_doctor)
    sub.add_parser("version", help="print the version").set_defaults(func=_cmd_version)
    _add_help(sub, parser)
    add_dev_commands(sub)
    return parser


def _add_validate(sub: Any) -> None:
    val = sub.add_parser(
        "validate",
        help="check GLMDeployment manifests against the schema, the known-issue rules and the policy",
        description=VALIDATE_DESCRIPTION,
    )
    val.add_argument(
        "-o",
        "--output",
        choices=["text", *REPORT_FORMATS],
        default="text",
        help="text for people (default); json or yaml: one result per object, with its repaired copy",
    )
    add_manifest_arguments(val)
    val.set_defaults(func=_cmd_validate, usage_parser=val)


def _add_render(sub: Any) -> None:
    ren = sub.add_parser(
        "render",
        help="print the Kubernetes objects the operator would apply (after admission's repairs)",
        description=RENDER_DESCRIPTION,
    )
    ren.add_argument(
        "-o",
        "--output",
        choices=OBJECT_FORMATS,
        default="yaml",
        help="yaml: one document per object (default); json: the object, or a v1 List of several",
    )
    ren.add_argument(
        "-n",
        "--namespace",
        type=namespace_name,
        help="the namespace of manifests without one (default: default); a manifest naming another is an error",
    )
    ren.add_argument(
        "--no-lws",
        dest="lws",
        action="store_false",
        help="render multi-node replicas as StatefulSets, as on a cluster without LeaderWorkerSet",
    )
    add_manifest_arguments(ren)
    ren.set_defaults(func=_cmd_render, usage_parser=ren)


def _add_canary(sub: Any) -> None:
    can = sub.add_parser(
        "canary",
        help="run the correctness canaries against any OpenAI-compatible endpoint",
        description="Exit 0 when every check passes, 1 when one fails, 2 when the endpoint is unreachable, "
        "answers an error, or answers something that is not the OpenAI API's.",
    )
    can.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    can.add_argument("--suite", action="append", choices=SUITES, help="run only these suites (repeatable)")
    can.add_argument("--gsm8k", help="GSM8K test.jsonl (few-shot examples from train.jsonl beside it)")
    can.add_argument("--model", help="model name to request (default: the first of /v1/models)")
    can.add_argument("--max-questions", type=int, default=200, help="GSM8K questions at most")
    can.add_argument(
        "--concurrency",
        type=_concurrency,
        default=64,
        help="requests in flight at once, in every suite (1-256, default 64)",
    )
    can.add_argument(
        "--timeout", type=float, default=120.0, help="seconds one request may take before the endpoint counts as hung"
    )
    can.add_argument(
        "--logprob-reference",
        type=float,
        help="reference mean NLL per token of this model for the logprob suite (off without it, unless asked for)",
    )
    can.add_argument("-o", "--output", choices=["text", "json"], default="text")
    can.set_defaults(func=_cmd_canary)


def _add_help(sub: Any, parser: argparse.ArgumentParser) -> None:
    """`glmctl help [COMMAND|dev]`, as `kubectl help apply`: dev lists the commands left out of --help."""
    topic = sub.add_parser("help", help="help on glmctl, a command, or (help dev) the developer commands")
    topic.add_argument("topic", nargs="?", metavar="COMMAND|dev")

    def show(args: argparse.Namespace) -> int:
        if args.topic is None:
            parser.print_help()
        elif args.topic == "dev":
            width = max(map(len, DEV_COMMANDS))
            print("Developer and test commands (each has --help):")
            for name, summary in DEV_COMMANDS.items():
                print(f"  {name:<{width}}  {summary}")
        elif args.topic in sub.choices and args.topic != "help":
            sub.choices[args.topic].print_help()
        else:
            topic.error(f"no help on {args.topic!r}; `glmctl help` lists the commands, `glmctl help dev` the others")
        return 0

    topic.set_defaults(func=show)


EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a tool stopped by SIGPIPE, as `cat big | head` stops cat."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (head, less) left: say nothing, and keep Python's exit-time flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
