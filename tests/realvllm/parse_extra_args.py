"""Run in the real-vLLM environment (not by pytest): parse each command line of a JSON list on stdin with vLLM's
own EngineArgs.add_cli_args + FlexibleArgumentParser + EngineArgs.from_cli_args, and print, for each, the managed
knobs it ends with, or the error vLLM refuses it with."""

from __future__ import annotations

import contextlib
import io
import json
import sys

from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser


def knobs(argv: list[str]) -> dict[str, object]:
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = EngineArgs.from_cli_args(parser.parse_args(argv))
    except SystemExit:
        return {"error": "argument parsing"}
    except Exception as err:  # noqa: BLE001 - any refusal while parsing is the answer
        return {"error": f"{type(err).__name__}: {err}"[:200]}
    attention = getattr(args.attention_config, "backend", None) or args.attention_backend
    return {
        "tensor": args.tensor_parallel_size,
        "pipeline": args.pipeline_parallel_size,
        "data": args.data_parallel_size,
        "expert": bool(args.enable_expert_parallel),
        "all2all": str(args.all2all_backend),
        "moe": str(getattr(args.kernel_config, "moe_backend", None) or args.moe_backend),
        "attention": str(attention),
        "speculative": json.dumps(args.speculative_config, sort_keys=True, default=str),
        "kv_cache_dtype": str(args.kv_cache_dtype),
    }


print(json.dumps([knobs(argv) for argv in json.load(sys.stdin)]))
