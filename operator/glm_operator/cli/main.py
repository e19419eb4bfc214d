"""glmctl entry point: one subcommand per job, each a thin shell over pure code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from glm_operator import __version__
from glm_operator.api.crd import render_crd_yaml
from glm_operator.canary.suite import SUITES
from glm_operator.catalog import load_accelerators
from glm_operator.catalog.images import load_images
from glm_operator.cli.canary_cmd import canary, sim
from glm_operator.cli.generate import stale_files, write_all
from glm_operator.cli.render import render
from glm_operator.cli.validate import validate
from glm_operator.render.fleet import FLEETS, default_fleet
from glm_operator.sim.endpoint_faults import ENDPOINT_FAULTS
from glm_operator.sim.faults import FAULTS


def _cmd_crd(_: argparse.Namespace) -> int:
    sys.stdout.write(render_crd_yaml())
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.check:
        stale = stale_files(root)
        for p in stale:
            print(f"{p}: out of date; run `glmctl generate` (or `make generate`) and commit it", file=sys.stderr)
        return 1 if stale else 0
    for p in write_all(root):
        print(f"wrote {p}")
    return 0


def _cmd_fleet(args: argparse.Namespace) -> int:
    nodes = default_fleet(load_accelerators(), args.nodes_per_type, FLEETS[args.shape])
    sys.stdout.write(yaml.safe_dump_all(nodes, sort_keys=False))
    return 0


IMAGE_POLICY_HELP = (
    "the cluster's image policy, as the operator enforces it: the chart's values file (its imagePolicy) or an "
    "imagePolicy mapping alone (allowCustomImages, allowedRepositories). Default: custom images allowed"
)


def _cmd_validate(args: argparse.Namespace) -> int:
    return validate(args.files, args.output, args.catalog, image_policy_file=args.image_policy)


def _cmd_render(args: argparse.Namespace) -> int:
    return render(args.files, args.lws, args.catalog, image_policy_file=args.image_policy)


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
    )


def _cmd_sim(args: argparse.Namespace) -> int:
    serve_args = list(args.serve_args)
    if serve_args[:1] == ["--"]:
        serve_args = serve_args[1:]
    return sim(
        args.host,
        args.port,
        args.fault,
        args.gsm8k,
        args.model,
        args.spec_tokens,
        args.latency_ms,
        args.load_seconds,
        args.gpu,
        args.vllm_version,
        args.patches,
        serve_args,
        args.accuracy,
        args.endpoint_fault,
    )


def _cmd_sim_fleet(args: argparse.Namespace) -> int:
    from glm_operator.sim.fleet import run

    overrides = dict(item.split("=", 1) for item in args.fault)
    run(args.gsm8k, overrides)
    return 0


def _cmd_version(_: argparse.Namespace) -> int:
    print(f"glmctl {__version__}")
    return 0


def _concurrency(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"{value}: must be between 1 and 256")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value}: must be between 0 and 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glmctl", description="glmops: GLM-5.x on vLLM, checked before it serves.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    crd = sub.add_parser("crd", help="print the GLMDeployment CRD generated from the API models")
    crd.set_defaults(func=_cmd_crd)

    gen = sub.add_parser("generate", help="write the generated files (CRDs, chart schema and README)")
    gen.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed file is stale")
    gen.add_argument("--root", default=".", help="repository root (default: .)")
    gen.set_defaults(func=_cmd_generate)

    fleet = sub.add_parser("fleet", help="print the fake GPU nodes of the local control plane")
    fleet.add_argument("--nodes-per-type", type=int, default=None, help="nodes of each accelerator type")
    fleet.add_argument(
        "--shape", choices=sorted(FLEETS), default="test", help="test: two nodes a type; demo: room for every sample"
    )
    fleet.set_defaults(func=_cmd_fleet)

    val = sub.add_parser(
        "validate",
        help="check GLMDeployment manifests against the schema, the known-issue rules and the policy",
        description="Exit 0 when every object is admitted (maybe repaired or with warnings), 1 when any is "
        "refused, 2 for bad input: unreadable, not YAML, over 16 MiB or expanded by YAML aliases beyond "
        "100000 values, or a file without any GLMDeployment. Objects of other kinds (a Service, a ConfigMap) "
        "are skipped with a note on stderr; the items of a `kind: List` are read. Values in messages are cut "
        "at 200 characters. Exit 141 when the reader of the output leaves early (as `| head`).",
    )
    val.add_argument("-o", "--output", choices=["text", "json"], default="text")
    val.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="FILE",
        help="a catalog extension (accelerators/models/images YAML, as in the glmops-catalog ConfigMap)",
    )
    val.add_argument("--image-policy", metavar="FILE", help=IMAGE_POLICY_HELP)
    val.add_argument("files", nargs="+", metavar="FILE", help="manifest files, or - for standard input")
    val.set_defaults(func=_cmd_validate)

    ren = sub.add_parser(
        "render",
        help="print the Kubernetes objects the operator would apply (after admission's repairs)",
        description="Exit 0 with the objects on stdout, 1 when admission refuses an object, 2 for bad input "
        "(as for validate: other kinds are skipped with a note, a file without any GLMDeployment is bad input).",
    )
    ren.add_argument(
        "--no-lws",
        dest="lws",
        action="store_false",
        help="render multi-node replicas as StatefulSets, as on a cluster without LeaderWorkerSet",
    )
    ren.add_argument("--catalog", action="append", default=[], metavar="FILE", help="a catalog extension")
    ren.add_argument("--image-policy", metavar="FILE", help=IMAGE_POLICY_HELP)
    ren.add_argument("files", nargs="+", metavar="FILE", help="manifest files, or - for standard input")
    ren.set_defaults(func=_cmd_render)

    can = sub.add_parser(
        "canary",
        help="run the correctness canaries against any OpenAI-compatible endpoint",
        description="Exit 0 when every check passes, 1 when one fails, 2 when the endpoint is unreachable.",
    )
    can.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    can.add_argument("--suite", action="append", choices=SUITES, help="run only these suites (repeatable)")
    can.add_argument("--gsm8k", help="GSM8K test.jsonl (few-shot examples from train.jsonl beside it)")
    can.add_argument("--model", help="model name to request (default: the first of /v1/models)")
    can.add_argument("--max-questions", type=int, default=200, help="GSM8K questions at most")
    can.add_argument(
        "--concurrency", type=_concurrency, default=64, help="GSM8K questions in flight at once (1-256, default 64)"
    )
    can.add_argument(
        "--logprob-reference",
        type=float,
        help="reference mean NLL per token of this model for the logprob suite (off without it, unless asked for)",
    )
    can.add_argument("-o", "--output", choices=["text", "json"], default="text")
    can.set_defaults(func=_cmd_canary)

    sm = sub.add_parser(
        "sim",
        help="a vLLM stand-in: OpenAI API, /health, /metrics, and the upstream failure signatures",
        description="With `-- vllm serve MODEL ARGS...` the fault follows from the flags, the environment, "
        "--gpu, --vllm-version and --patches (fault auto).",
    )
    sm.add_argument("--host", default="127.0.0.1")
    sm.add_argument("--port", type=int, default=8000)
    sm.add_argument("--fault", choices=["auto", *FAULTS], default="auto")
    sm.add_argument(
        "--endpoint-fault",
        choices=ENDPOINT_FAULTS,
        help="break the OpenAI endpoints (not /health): HTTP 500, truncated JSON, connection reset, "
        "an answer that hangs after its first byte, or one byte a second",
    )
    sm.add_argument("--gsm8k", help="GSM8K JSONL whose gold answers a healthy model gives")
    sm.add_argument("--model", default="zai-org/GLM-5.3", help="served model name (without serve args)")
    sm.add_argument(
        "--spec-tokens", type=int, default=0, help="MTP tokens per step (without serve args; 1 with --fault mtp-zero)"
    )
    sm.add_argument("--latency-ms", type=int, default=0, help="added latency per request")
    sm.add_argument(
        "--accuracy", type=_share, default=1.0, help="share of GSM8K questions a healthy model answers right (0-1)"
    )
    sm.add_argument("--load-seconds", type=float, default=0.0, help="refuse connections this long, as while loading")
    sm.add_argument("--gpu", default="H200", help="accelerator type the pod runs on")
    sm.add_argument(
        "--vllm-version",
        default=load_images().default_version,
        help="vLLM version of the image (default: the catalog's)",
    )
    sm.add_argument("--patches", default="", help="comma-separated glmops patches in the image")
    sm.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- vllm serve MODEL ARGS...")
    sm.set_defaults(func=_cmd_sim)

    fleet_sim = sub.add_parser(
        "sim-fleet",
        help="(test and demo tooling) run a simulator on the IP of every serving pod of a kwok cluster",
    )
    fleet_sim.add_argument("--gsm8k", help="GSM8K JSONL for the simulators' gold answers")
    fleet_sim.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME=FAULT",
        help="force a failure the rules do not know onto one GLMDeployment's pods",
    )
    fleet_sim.set_defaults(func=_cmd_sim_fleet)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=_cmd_version)
    return parser


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
