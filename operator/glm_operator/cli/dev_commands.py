"""The developer and test commands of `glmctl`: kept out of `glmctl --help`, listed by `glmctl help dev`.

They stay as they were (scripts and the Makefile call `glmctl generate`, `fleet` and `sim-fleet`); they are
only left out of the user's list of commands, which names what a user of the operator runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from glm_operator.api.crd import render_crd_yaml
from glm_operator.catalog import load_accelerators
from glm_operator.catalog.images import load_images
from glm_operator.cli.canary_cmd import sim
from glm_operator.cli.generate import stale_files, write_all
from glm_operator.render.fleet import FLEETS, default_fleet
from glm_operator.sim.endpoint_faults import ENDPOINT_FAULTS
from glm_operator.sim.faults import FAULTS

DEV_COMMANDS = {
    "crd": "print the GLMDeployment CRD generated from the API models",
    "generate": "write the generated files (CRDs, chart schema and README)",
    "fleet": "print the fake GPU nodes of the local control plane",
    "sim": "a vLLM stand-in: OpenAI API, /health, /metrics, and the upstream failure signatures",
    "sim-fleet": "run a simulator on the IP of every serving pod of a kwok cluster",
}
"""Each developer command and its one line, for `glmctl help dev` and the command's own --help."""


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


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value}: must be between 0 and 1")
    return value


def add_dev_commands(sub: Any) -> None:
    """Register the developer commands without `help=`: argparse then leaves them out of the command list."""

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, description=DEV_COMMANDS[name], **kwargs)
        return parser

    command("crd").set_defaults(func=_cmd_crd)

    gen = command("generate")
    gen.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed file is stale")
    gen.add_argument("--root", default=".", help="repository root (default: .)")
    gen.set_defaults(func=_cmd_generate)

    fleet = command("fleet")
    fleet.add_argument("--nodes-per-type", type=int, default=None, help="nodes of each accelerator type")
    fleet.add_argument(
        "--shape", choices=sorted(FLEETS), default="test", help="test: two nodes a type; demo: room for every sample"
    )
    fleet.set_defaults(func=_cmd_fleet)

    _add_sim(command("sim", epilog=SIM_EPILOG))

    fleet_sim = command("sim-fleet")
    fleet_sim.add_argument("--gsm8k", help="GSM8K JSONL for the simulators' gold answers")
    fleet_sim.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME=FAULT",
        help="force a failure the rules do not know onto one GLMDeployment's pods",
    )
    fleet_sim.set_defaults(func=_cmd_sim_fleet)


SIM_EPILOG = (
    "With `-- vllm serve MODEL ARGS...` the fault follows from the flags, the environment, "
    "--gpu, --vllm-version and --patches (fault auto)."
)


def _add_sim(sm: argparse.ArgumentParser) -> None:
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
