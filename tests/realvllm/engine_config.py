"""Run in the real-vLLM environment (not by pytest): for each rendered `vllm serve` command line of a JSON request on
stdin, run vLLM's own start-up validation as far as it goes without a GPU, and print vLLM's verdict for each.

What runs, in vLLM's order for `vllm serve`: the serve parser (`make_arg_parser`), `validate_parsed_serve_args`,
`AsyncEngineArgs.from_cli_args`, then `create_engine_config`, which builds `VllmConfig` (model, parallel, cache,
speculative, kernel and compilation configs, and the platform's `check_and_update_config`). The model is a local
directory holding a GLM-5.x-shaped `config.json` (no weights, no tokenizer), written here from transformers'
`GlmMoeDsaConfig` (whose defaults are GLM-5's published shape) with the catalog entry's values on top.

Request: {"tokenizer": a directory with tokenizer.json and tokenizer_config.json (the reasoning and tool parsers
load the tokenizer), "models": {name: {config overrides}}, "commands": [{"model": name, "argv": [...]}]}.
Answer: one entry per command: {"refused": false} or {"refused": true, "error": ...}.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from transformers import GlmMoeDsaConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser

try:  # 0.32.0
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:  # older layouts
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # type: ignore[no-redef]


def write_model(root: Path, name: str, overrides: dict[str, Any], tokenizer: Path) -> Path:
    config = GlmMoeDsaConfig()
    data = config.to_dict()
    data.update(overrides)
    # transformers derives these per-layer lists from the layer count; let it derive them again.
    for derived in ("layer_types", "mlp_layer_types", "indexer_types"):
        data.pop(derived, None)
    data["architectures"] = ["GlmMoeDsaForCausalLM"]
    directory = root / name.replace("/", "--")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(data))
    for part in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / part, directory / part)
    return directory


def verdict(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit:
        return {"refused": True, "error": "argument parsing"}
    try:
        validate_parsed_serve_args(args)
        AsyncEngineArgs.from_cli_args(args).create_engine_config()
    except Exception as err:  # noqa: BLE001 - any refusal while starting is the answer
        message = " ".join(f"{type(err).__name__}: {err}".split())
        return {"refused": True, "error": message[:400]}
    return {"refused": False}


def main() -> None:
    request = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = Path(request["tokenizer"])
        dirs = {name: str(write_model(Path(tmp), name, o, tokenizer)) for name, o in request["models"].items()}
        parser = make_arg_parser(FlexibleArgumentParser())  # built once: parsing leaves it unchanged
        answers = []
        for command in request["commands"]:
            argv = [a if a != "<model>" else dirs[command["model"]] for a in command["argv"]]
            answers.append(verdict(parser, argv))
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
