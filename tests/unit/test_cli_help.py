"""`glmctl --help` lists what a user runs; the developer commands stay callable, listed by `glmctl help dev`."""

from __future__ import annotations

import re

import pytest

from glm_operator.cli.dev_commands import DEV_COMMANDS
from glm_operator.cli.main import build_parser, main

USER_COMMANDS = ["validate", "render", "canary", "doctor", "version", "help"]


def listed_commands(help_text: str) -> list[str]:
    """The command names argparse lists under `commands:`, each on a line of its own."""
    section = help_text.split("commands:", 1)[1]
    return re.findall(r"^    (\S+)", section, flags=re.M)


def help_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_user_commands_only(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, ["--help"])
    assert listed_commands(text) == USER_COMMANDS
    assert "`glmctl help dev`" in text


@pytest.mark.parametrize("command", list(DEV_COMMANDS))
def test_help_dev_lists_each_developer_command_with_its_line(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert main(["help", "dev"]) == 0
    assert re.search(rf"^  {re.escape(command)} +{re.escape(DEV_COMMANDS[command])}$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize(
    "argv, parsed",
    [
        (["crd"], {}),
        (["generate", "--check", "--root", "/r"], {"check": True, "root": "/r"}),
        (["fleet", "--nodes-per-type", "2"], {"nodes_per_type": 2}),
        (["sim-fleet"], {"gsm8k": None, "fault": []}),
        (["sim-fleet", "--gsm8k", "t.jsonl", "--fault", "ns/a=mtp-zero"], {"fault": ["ns/a=mtp-zero"]}),
        (
            ["sim", "--port", "9000", "--", "vllm", "serve", "m"],
            {"port": 9000, "serve_args": ["--", "vllm", "serve", "m"]},
        ),
    ],
    ids=["crd", "generate-check", "fleet", "sim-fleet-as-demo-sh-calls-it", "sim-fleet-with-faults", "sim-serve-args"],
)
def test_developer_commands_take_the_arguments_they_took_before(argv: list[str], parsed: dict[str, object]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command == argv[0] and callable(args.func)
    assert {key: getattr(args, key) for key in parsed} == parsed


@pytest.mark.parametrize("command", [*USER_COMMANDS[:-1], *DEV_COMMANDS])
def test_help_on_a_command_is_that_commands_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert main(["help", command]) == 0
    assert capsys.readouterr().out.startswith(f"usage: glmctl {command} ")


def test_help_on_an_unknown_topic_says_where_to_look(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["help", "nope"])
    assert exit_.value.code == 2
    assert "`glmctl help dev`" in capsys.readouterr().err
