"""The operator's log and Events: one line per record and no secret-like value, in every log format."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kopf._core.actions.loggers import LogFormat, make_formatter

from glm_operator.k8s.logs import MAX_RECORD_CHARS, SafeFormatter, install, one_safe_line

FORGED = "evil\n[2026-12-02 17:00:00,000] kopf.objects [INFO    ] [default/other] Handler 'x' succeeded."


@pytest.fixture(params=[LogFormat.FULL, LogFormat.PLAIN, LogFormat.JSON], ids=["full", "plain", "json"])
def logged(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, io.StringIO, LogFormat]]:
    """A logger whose handler writes through kopf's formatter of the given format, as `kopf run --log-format` does."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter(log_format=request.param))
    logger = logging.getLogger(f"glmops.test.logs.{request.param.name}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    assert install((logger.name,)) == 1 and install((logger.name,)) == 0  # re-entrant
    yield logger, stream, request.param
    logger.handlers.clear()


def test_a_name_with_a_newline_cannot_forge_a_log_line(logged: tuple[logging.Logger, io.StringIO, LogFormat]) -> None:
    logger, stream, fmt = logged
    logger.warning("rules engine failed on %s", FORGED)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    if fmt is LogFormat.JSON:
        assert json.loads(lines[0])["message"].endswith("Handler 'x' succeeded.")
    else:
        assert "evil\\n[2026-12-02" in lines[0]


def test_a_traceback_is_one_line_too(logged: tuple[logging.Logger, io.StringIO, LogFormat]) -> None:
    logger, stream, _ = logged
    try:
        raise ValueError(FORGED)
    except ValueError:
        logger.exception("webhook failed")
    assert len(stream.getvalue().splitlines()) == 1


def test_a_secret_flag_is_never_logged(logged: tuple[logging.Logger, io.StringIO, LogFormat]) -> None:
    logger, stream, _ = logged
    logger.info("args %s", ["--api_key", "sk-live-1"])
    logger.info("refused: spec.engine.extraArgs[0]: --api_key=sk-live-2 and HF_TOKEN=hf_live_3")
    text = stream.getvalue()
    assert "sk-live-1" not in text and "sk-live-2" not in text and "hf_live_3" not in text
    assert text.count("<redacted>") == 3


def test_events_get_the_same_treatment_through_kopfs_poster() -> None:
    poster = next(h for h in logging.getLogger("kopf.objects").handlers if type(h).__name__ == "K8sPoster")
    before = poster.formatter
    try:
        install(("kopf.objects",))
        assert isinstance(poster.formatter, SafeFormatter)
        record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, "%s", ("--api-key=sk-x\nforged",), None)
        assert poster.format(record) == "--api-key=<redacted>\\nforged"
    finally:
        poster.setFormatter(before)


def test_a_huge_record_is_cut_and_says_so() -> None:
    line = one_safe_line("x" * (MAX_RECORD_CHARS * 3))
    assert line.endswith(f"... (cut, {MAX_RECORD_CHARS * 3} characters in all)")
    assert len(line) < MAX_RECORD_CHARS + 100


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text())
def test_any_text_becomes_exactly_one_line(text: str) -> None:
    assert len(one_safe_line(text).splitlines()) <= 1
