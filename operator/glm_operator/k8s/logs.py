"""What the operator's log and its Events may carry: one line per record, no secret-like value.

kopf writes log records (text or JSON, `--log-format`) to stderr and posts those about an object as Events (its
`K8sPoster` handler on `kopf.objects`). A record can carry what a user wrote: a name with a newline would start a
forged line in the text formats, and `--api-key=VALUE` in `spec.engine.extraArgs` would be echoed. `install`
wraps the formatter of each of those handlers so that every record, whatever its source or format, is redacted
(`rules/findings.py` `redact`), cut at MAX_RECORD_CHARS, and has its control characters and line separators
escaped (`\\n`, `\\r`, `\\x1b`, `\\u2028`), so one record is one line.
"""

from __future__ import annotations

import logging

from glm_operator.rules.findings import redact

MAX_RECORD_CHARS = 64 * 1024
"""A record longer than this (a traceback of a huge value) is cut, with its length said."""
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x85: "\\x85",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def one_safe_line(text: str) -> str:
    """`text` redacted, bounded and escaped onto one line."""
    cut = len(text) > MAX_RECORD_CHARS
    safe = redact(text, window=MAX_RECORD_CHARS).translate(_ESCAPES)
    return f"{safe}... (cut, {len(text)} characters in all)" if cut else safe


class SafeFormatter(logging.Formatter):
    """Another formatter's output, made one safe line (`one_safe_line`)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return one_safe_line(self.inner.format(record))


def install(loggers: tuple[str, ...] = ("", "kopf.objects")) -> int:
    """Wrap the formatters of the handlers of `loggers` (root: the log; kopf.objects: Events); how many were wrapped.

    Re-entrant: a formatter already wrapped is left as it is.
    """
    wrapped = 0
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler.formatter, SafeFormatter):
                continue
            handler.setFormatter(SafeFormatter(handler.formatter or logging.Formatter()))
            wrapped += 1
    return wrapped
