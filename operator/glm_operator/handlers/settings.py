"""Operator-wide kopf settings: our own finalizer and annotation prefix, so renames lose nothing."""

from __future__ import annotations

from typing import Any

import kopf

PREFIX = "glmops.dev"


@kopf.on.startup(id="glmops-settings")
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Store kopf's progress and diff-base in glmops.dev/ annotations and use our finalizer."""
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = 20  # INFO and above become Kubernetes Events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
