"""A context for work that outlives the kopf handler that starts it: kopf's Event posting, not the handler's cause.

Tasks and callbacks started inside a handler copy its context variables, and kopf keeps the handler's cause there: the
whole object it was called for, with its patch and memo. A canary task lives as long as its pod and a refresh as long
as a burst of events, so each would keep an object kopf is otherwise done with (at 1,000 deployments, over a thousand
pods and owned objects; bench/RESULTS.md, reconcile scale). Everything else in the context, such as what
`kopf.info`/`kopf.warn` post Events through, is kept.
"""

from __future__ import annotations

import contextvars

# kopf's variable for the cause of the handler being run (kopf/_core/actions/execution.py); a test holds kopf to it.
HANDLER_CAUSE = "cause_var"


def detached_context() -> contextvars.Context:
    """A copy of the current context without the running handler's cause."""
    clean = contextvars.Context()
    for var, value in contextvars.copy_context().items():
        if var.name != HANDLER_CAUSE:
            clean.run(var.set, value)
    return clean
