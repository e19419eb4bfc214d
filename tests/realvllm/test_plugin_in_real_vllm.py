"""The glmops plugin inside a real vLLM server: loaded in every process, one line per patch, a counting metric."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import defaultdict

import httpx
from glmops_vllm_patches.registry import PATCHES

from tests.realvllm.conftest import SERVED_NAME, RealServer

LINE = re.compile(r"pid=(\d+)\).*glmops patch (\S+) \((\S+)\) (applied|skipped): (.*)$")
SERIES = f'{{model_name="{SERVED_NAME}"}}'


def _plugin_lines(log: str) -> dict[str, list[tuple[str, str, str]]]:
    per_pid: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for line in log.splitlines():
        match = LINE.search(line)
        if match:
            pid, name, _, verb, reason = match.groups()
            per_pid[pid].append((name, verb, reason))
    return per_pid


def test_every_vllm_process_logs_one_line_per_patch(real_vllm: RealServer) -> None:
    per_pid = _plugin_lines(real_vllm.log())
    # The API server, the engine core and the worker each load general plugins.
    assert len(per_pid) == 3, real_vllm.log()[-3000:]
    for lines in per_pid.values():
        assert sorted(name for name, _, _ in lines) == sorted(p.info.name for p in PATCHES)


def test_patches_for_other_platforms_say_they_are_skipped_and_the_counter_applies(real_vllm: RealServer) -> None:
    for lines in _plugin_lines(real_vllm.log()).values():
        outcome = {name: (verb, reason) for name, verb, reason in lines}
        assert outcome.pop("null-content-metrics")[0] == "applied"
        for verb, reason in outcome.values():
            assert verb == "skipped" and reason.startswith("platform cpu is not affected (only ")


def _counters(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    assert "# TYPE glmops_chat_null_content_total counter" in text
    values = {}
    for name in ("glmops_chat_completions_total", "glmops_chat_null_content_total"):
        values[name] = float(re.search(re.escape(name + SERIES) + r" (\S+)", text)[1])  # type: ignore[index]
    return values["glmops_chat_completions_total"], values["glmops_chat_null_content_total"]


def test_the_null_content_counter_counts_real_answers_streamed_or_not(real_vllm: RealServer) -> None:
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Name a planet."}], "max_tokens": 8}
    completions, nulls = _counters(real_vllm.url)
    answer = httpx.post(f"{real_vllm.url}/v1/chat/completions", json=body, timeout=120).json()
    message = answer["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"]
    with httpx.stream("POST", f"{real_vllm.url}/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        frames = [line for line in r.iter_lines() if line.startswith("data:")]
    assert frames[-1] == "data: [DONE]"
    assert _counters(real_vllm.url) == (completions + 2, nulls + 2)


WRAPPED = """
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
from glmops_vllm_patches import plugin
from glmops_vllm_patches.base import Context, PatchTargetMissing, marked, resolve
from glmops_vllm_patches.registry import PATCHES
ctx, report = plugin.current_context(), {}
for patch in PATCHES:
    wrapped = []
    # A patch names its targets per platform it applies to; look at all of them.
    targets = {t for p in patch.info.platforms for t in patch.targets(Context(ctx.version, p, ctx.env))}
    for target in sorted(targets, key=str):
        try:
            if marked(resolve(target), patch.info.name):
                wrapped.append(str(target))
        except PatchTargetMissing:
            pass  # not in this build: nothing there to change
    report[patch.info.name] = {"applied": plugin.outcomes()[patch.info.name].applied, "wrapped": wrapped}
print("@@" + json.dumps(report))
"""


def test_patches_skipped_on_this_platform_wrap_nothing_in_vllm(real_vllm: RealServer) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([real_vllm.python, "-c", WRAPPED], capture_output=True, text=True, timeout=600, env=env)
    assert "@@" in out.stdout, out.stderr[-3000:]
    report = json.loads(out.stdout.rsplit("@@", 1)[1])
    assert report.pop("null-content-metrics") == {
        "applied": True,
        "wrapped": [
            "vllm.entrypoints.openai.chat_completion.serving::OpenAIServingChat.__init__",
            "vllm.entrypoints.openai.chat_completion.serving::OpenAIServingChat.create_chat_completion",
        ],
    }
    assert report == {name: {"applied": False, "wrapped": []} for name in report} and len(report) == 3
