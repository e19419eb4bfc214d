"""How `glmctl canary` shows a run while it happens, on stderr (stdout keeps the table or JSON alone).

On a terminal: one bar per check, redrawn in place (questions answered of those planned, running accuracy, time since
the run started); a check that has decided leaves its last line, and the bar goes before the results are printed.
Anywhere else (a pipe, a file, a CI log, TERM=dumb): plain lines, no control characters: one when a check starts,
one every `PLAIN_EVERY_S` while it runs, and one when it decides.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TextIO

from glm_operator.canary.progress import CheckProgress, Clock, Throttle

PLAIN_EVERY_S = 10.0
REDRAW_EVERY_S = 0.1  # a wave of 64 answers arrives at once: redraw the bar at most ten times a second
BAR_WIDTH = (10, 40)  # the bar's narrowest and widest, in characters
CLEAR_LINE = "\r\033[K"


def draws_bar(stream: TextIO) -> bool:
    """Whether `stream` is a terminal that redraws a line in place."""
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


def figures_text(figures: CheckProgress) -> str:
    """`40/200 asked, 38 right (95.0%)`; only the count before the first answer."""
    text = f"{figures.asked}/{figures.planned} asked"
    if figures.ratio is not None:
        text += f", {figures.correct} right ({figures.ratio:.1%})"
    return text


class ProgressView:
    """The callback `run_suite` reports to, drawing on `stream`; `close()` before printing anything else there."""

    def __init__(
        self, stream: TextIO, bar: bool | None = None, clock: Clock = time.monotonic, columns: int | None = None
    ) -> None:
        self.stream = stream
        self.bar = draws_bar(stream) if bar is None else bar
        self.clock = clock
        self.columns = columns
        self.started = clock()
        self._drawn = False
        self._check = ""
        self._next_draw = 0.0
        self._throttle = Throttle(PLAIN_EVERY_S, clock)

    def __call__(self, figures: CheckProgress) -> None:
        new = figures.check != self._check
        self._check = figures.check
        if self.bar:
            self._draw(figures, force=new or figures.done)
            return
        if new:
            self._throttle = Throttle(PLAIN_EVERY_S, self.clock)
            what = f"up to {figures.planned} questions" if figures.planned else "no scored questions"
            self._line(f"{figures.check}: started, {what}")
        elif figures.done:
            self._line(f"{figures.check}: decided, {figures_text(figures)}")
        elif self._throttle.due():
            self._line(f"{figures.check}: {figures_text(figures)}")

    def close(self) -> None:
        """Clear the bar (plain lines stay as they are)."""
        if self.bar and self._drawn:
            self.stream.write(CLEAR_LINE)
            self.stream.flush()
            self._drawn = False

    def _since(self) -> str:
        return elapsed(self.clock() - self.started)

    def _line(self, text: str) -> None:
        self.stream.write(f"{text}, {self._since()}\n")
        self.stream.flush()

    def _draw(self, figures: CheckProgress, force: bool) -> None:
        now = self.clock()
        if not force and now < self._next_draw:
            return
        self._next_draw = now + REDRAW_EVERY_S
        line = self.bar_line(figures)
        # A decided check keeps its line; the next check's bar is drawn under it.
        self.stream.write(CLEAR_LINE + line + ("\n" if figures.done else ""))
        self.stream.flush()
        self._drawn = not figures.done

    def bar_line(self, figures: CheckProgress) -> str:
        """`gsm8k [#####.....] 40/200 asked, 38 right (95.0%) 12s`, fitted to the terminal's width."""
        tail = f"{figures_text(figures)}  {self._since()}" if figures.planned else f"running  {self._since()}"
        head = f"{figures.check:<12} "
        if not figures.planned:
            return head + tail
        columns = self.columns or shutil.get_terminal_size().columns
        width = max(BAR_WIDTH[0], min(BAR_WIDTH[1], columns - len(head) - len(tail) - 5))
        filled = round(width * min(figures.asked, figures.planned) / figures.planned)
        return f"{head}[{'#' * filled}{'.' * (width - filled)}]  {tail}"[: max(columns - 1, 20)]
