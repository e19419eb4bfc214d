"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from tests.support.cluster import pinned_helm


@pytest.fixture(scope="module")
def helm() -> str:
    """The pinned helm binary, for tests that render the chart; skipped where it is not built."""
    pinned = pinned_helm()
    if not pinned.is_file():
        pytest.skip(f"helm is not built at {pinned}: run cluster/build.sh (make tools)")
    return str(pinned)
