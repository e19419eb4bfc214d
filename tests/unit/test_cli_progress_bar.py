"""`glmctl canary` shows the run while it happens: a bar redrawn in place on a terminal, plain lines when piped."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import re
import socket
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from glm_operator.canary.progress import CheckProgress
from glm_operator.cli.progress_bar import CLEAR_LINE, PLAIN_EVERY_S, ProgressView, draws_bar, elapsed
from glm_operator.sim.behaviour import Model
from glm_operator.sim.server import Simulator

CONTROL = re.compile(r"[\r\x1b]")


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _feed(view: ProgressView, clock: FakeClock) -> None:
    view(CheckProgress("smoke", 0, 4))
    view(CheckProgress("smoke", 4, 4, 4, done=True))
    view(CheckProgress("gsm8k", 0, 200))
    for asked in range(1, 41):  # one answer every second for 40 s
        clock.now += 1
        view(CheckProgress("gsm8k", asked, 200, asked - asked // 10))
    view(CheckProgress("gsm8k", 40, 200, 36, done=True))
    view(CheckProgress("spec-decode", 0, 0))


def test_piped_output_is_plain_lines_at_start_every_ten_seconds_and_when_decided() -> None:
    clock, out = FakeClock(), io.StringIO()
    view = ProgressView(out, clock=clock)
    assert not view.bar
    _feed(view, clock)
    view.close()
    text = out.getvalue()
    assert not CONTROL.search(text), repr(text)
    assert text.splitlines() == [
        "smoke: started, up to 4 questions, 0s",
        "smoke: decided, 4/4 asked, 4 right (100.0%), 0s",
        "gsm8k: started, up to 200 questions, 0s",
        "gsm8k: 10/200 asked, 9 right (90.0%), 10s",
        "gsm8k: 20/200 asked, 18 right (90.0%), 20s",
        "gsm8k: 30/200 asked, 27 right (90.0%), 30s",
        "gsm8k: 40/200 asked, 36 right (90.0%), 40s",
        "gsm8k: decided, 40/200 asked, 36 right (90.0%), 40s",
        "spec-decode: started, no scored questions, 40s",
    ]
    assert PLAIN_EVERY_S == 10


def test_a_terminal_gets_a_bar_redrawn_in_place_that_goes_before_the_results() -> None:
    clock, out = FakeClock(), Terminal()
    view = ProgressView(out, clock=clock, columns=100)
    assert view.bar
    _feed(view, clock)
    text = out.getvalue()
    frames = text.split(CLEAR_LINE)
    assert "\n" not in text.replace("]  4/4 asked, 4 right (100.0%)  0s\n", "").replace("36 right (90.0%)  40s\n", "")
    assert frames[-1] == "spec-decode  running  40s"
    gsm8k = [f for f in frames if f.startswith("gsm8k")]
    assert gsm8k[0] == "gsm8k        [" + "." * 40 + "]  0/200 asked  0s"
    assert gsm8k[-1] == "gsm8k        [########" + "." * 32 + "]  40/200 asked, 36 right (90.0%)  40s\n"
    assert all(len(f.rstrip("\n")) < 100 for f in frames)
    view.close()
    assert out.getvalue().endswith(CLEAR_LINE)


def test_a_narrow_terminal_still_gets_a_bar_within_its_width() -> None:
    view = ProgressView(Terminal(), clock=FakeClock(), columns=60)
    line = view.bar_line(CheckProgress("null-content", 7, 20, 7))
    assert len(line) <= 59 and "[####" in line


@pytest.mark.parametrize(
    "stream, term, bar",
    [(Terminal(), "xterm-256color", True), (Terminal(), "dumb", False), (io.StringIO(), "xterm-256color", False)],
    ids=["terminal", "dumb-terminal", "pipe"],
)
def test_only_a_terminal_that_redraws_gets_the_bar(
    stream: io.StringIO, term: str, bar: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", term)
    assert draws_bar(stream) is bar


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (59.9, "59s"), (61, "1m01s"), (3600, "60m00s")])
def test_elapsed_reads_as_minutes_and_seconds(seconds: float, text: str) -> None:
    assert elapsed(seconds) == text


# --- the real command, on a real terminal and through a pipe --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def url() -> AsyncIterator[str]:
    app = Simulator(Model("none"), "zai-org/GLM-5.3", latency_s=0.01).app()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _command(url: str) -> list[str]:
    suites = ["--suite", "smoke", "--suite", "gsm8k", "--max-questions", "30", "--concurrency", "4"]
    return [sys.executable, "-m", "glm_operator.cli.main", "canary", "--url", url, *suites, "-o", "json"]


async def test_glmctl_canary_piped_writes_plain_progress_lines_and_clean_json(url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *_command(url), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    assert stdout.lstrip().startswith(b"{")  # the results alone on stdout
    text = stderr.decode()
    assert not CONTROL.search(text), repr(text)
    assert re.search(r"^gsm8k: decided, 24/30 asked, 24 right \(100\.0%\), \d+s$", text, re.MULTILINE), text


async def test_glmctl_canary_on_a_terminal_draws_the_bar_and_clears_it(url: str) -> None:
    primary, secondary = pty.openpty()
    os.set_blocking(primary, False)
    received = bytearray()
    loop = asyncio.get_running_loop()

    def read() -> None:
        try:
            received.extend(os.read(primary, 65536))
        except OSError:  # EIO once the terminal's last writer closed it
            loop.remove_reader(primary)

    loop.add_reader(primary, read)
    try:
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
        proc = await asyncio.create_subprocess_exec(
            *_command(url), stdout=asyncio.subprocess.PIPE, stderr=secondary, env=env
        )
        os.close(secondary)
        stdout, _ = await asyncio.wait_for(proc.communicate(), 120)
        await asyncio.sleep(0.2)
        read()
    finally:
        loop.remove_reader(primary)
        os.close(primary)
    text = received.decode()
    assert proc.returncode == 0, text
    assert stdout.lstrip().startswith(b"{")
    frames = text.split(CLEAR_LINE)
    # redrawn in place, and the decided check's bar kept on its own line (the terminal ends lines with CRLF)
    gsm8k = [f for f in frames if f.startswith("gsm8k")]
    assert re.fullmatch(r"gsm8k +\[\.{40}\]  0/30 asked  \d+s", gsm8k[0]), text
    for between in gsm8k[1:-1]:  # as many as the answers' pace leaves (redrawn at most ten times a second)
        assert re.fullmatch(r"gsm8k +\[#*\.*\]  \d+/30 asked, \d+ right \(100\.0%\)  \d+s", between), text
    assert re.fullmatch(r"gsm8k +\[#{32}\.{8}\]  24/30 asked, 24 right \(100\.0%\)  \d+s\r\n", gsm8k[-1]), text
    assert gsm8k[-1] == frames[-1]
    # nothing half-drawn is left for the results to be printed after: a decided check's line, or the bar cleared
    assert text.endswith(("\n", CLEAR_LINE)), repr(text[-80:])
