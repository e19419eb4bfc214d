"""The real server runs the command glmops renders for a GLM-5.x pod; each difference is named with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.realvllm.conftest import POD, SERVED_NAME, RealServer
from tests.realvllm.rendered import ADDED, ADDED_ENV, REPLACED, flag_value

# The flags every GLM-5.x pod gets, which these tests must exercise as rendered.
GLM5_FLAGS = ("--served-model-name", "--reasoning-parser", "--tool-call-parser")


def _flags(argv: list[str]) -> dict[str, str | None]:
    """`--flag value` and bare `--switch` pairs of a command line (positional arguments left out)."""
    out: dict[str, str | None] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            following = argv[i + 1] if i + 1 < len(argv) else None
            out[token] = following if following is not None and not following.startswith("--") else None
    return out


def test_the_server_process_runs_the_rendered_command_but_for_the_named_adaptations(real_vllm: RealServer) -> None:
    started = Path(f"/proc/{real_vllm.pid}/cmdline").read_bytes().split(b"\0")[:-1]
    # The environment's python is a wrapper that execs vLLM's interpreter with the plugin on the path.
    assert [a.decode() for a in started][1:] == real_vllm.argv[1:]
    rendered, running = _flags(POD.argv), _flags(real_vllm.argv)
    assert POD.argv[:2] == ["vllm", "serve"] and real_vllm.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    changed = {flag for flag in rendered if running.get(flag, "<absent>") != rendered[flag]}
    assert changed == set(REPLACED), {f: (rendered[f], running.get(f)) for f in changed}
    assert running["--tensor-parallel-size"] == REPLACED["--tensor-parallel-size"][0]
    assert set(running) - set(rendered) == set(ADDED)
    for flag in GLM5_FLAGS:
        assert running[flag] == rendered[flag], flag
    assert "--enable-auto-tool-choice" in real_vllm.argv
    assert (
        json.loads(str(running["--speculative-config"]))
        == POD.speculative
        == {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 3,
        }
    ), "spec.engine.speculative.promptLookupMax is rendered into the config the server runs"


def test_the_rendered_environment_and_the_named_additions_reach_the_server(real_vllm: RealServer) -> None:
    environ = dict(
        entry.split(b"=", 1)
        for entry in Path(f"/proc/{real_vllm.pid}/environ").read_bytes().split(b"\0")
        if b"=" in entry
    )
    for name, value in {**POD.env, **{k: v for k, (v, _) in ADDED_ENV.items()}}.items():
        assert environ.get(name.encode()) == value.encode(), name


def test_vllm_took_the_glm5_parsers_and_speculation_as_rendered(real_vllm: RealServer) -> None:
    (line,) = [line for line in real_vllm.log().splitlines() if "non-default args:" in line][:1]
    assert f"'reasoning_parser': '{flag_value(POD.argv, '--reasoning-parser')}'" in line, line
    assert f"'tool_call_parser': '{flag_value(POD.argv, '--tool-call-parser')}'" in line, line
    assert "'enable_auto_tool_choice': True" in line, line
    assert "'method': 'ngram'" in line and "'num_speculative_tokens': 3" in line, line
    assert "'prompt_lookup_max': 3" in line, line


def test_a_tool_call_request_is_taken_by_the_rendered_tool_parser(real_vllm: RealServer) -> None:
    tool = {
        "type": "function",
        "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}},
    }
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Add 2 and 2."}], "max_tokens": 8}
    # vLLM refuses tool_choice "auto" (400) unless started with --enable-auto-tool-choice and a tool-call parser.
    tools = {"tools": [tool], "tool_choice": "auto"}
    answer = httpx.post(f"{real_vllm.url}/v1/chat/completions", json={**body, **tools}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert not answer.json()["choices"][0]["message"].get("tool_calls"), "a random model calls no tool"


def test_every_probe_glmops_renders_answers_on_the_real_server(real_vllm: RealServer) -> None:
    port = POD.container["ports"][0]
    assert port["containerPort"] == int(flag_value(POD.argv, "--port")), "the probes' named port is the served one"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = POD.container[probe]["httpGet"]
        assert get["port"] == port["name"]
        assert httpx.get(f"{real_vllm.url}{get['path']}", timeout=get.get("timeoutSeconds", 10)).status_code == 200
