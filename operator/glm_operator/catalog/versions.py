"""vLLM release versions: parsing and comparison without a dependency."""

from __future__ import annotations

import re
from functools import lru_cache, total_ordering
from typing import TypeVar

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[.+-]?([A-Za-z0-9.+-]*))?$")


@total_ordering
class Version:
    """A vLLM release like 0.30.0 (a pre-release suffix sorts before the release)."""

    __slots__ = ("major", "minor", "patch", "suffix")

    def __init__(self, major: int, minor: int, patch: int, suffix: str = "") -> None:
        self.major, self.minor, self.patch, self.suffix = major, minor, patch, suffix

    @classmethod
    def parse(cls, text: str) -> Version:
        return _parse(text)

    @classmethod
    def from_tag(cls, tag: str) -> Version | None:
        """The version in an image tag like v0.30.0 or v0.30.0-glmops.1, if there is one."""
        match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", tag)
        return cls(int(match[1]), int(match[2]), int(match[3])) if match else None

    def _key(self) -> tuple[int, int, int, int, str]:
        return (self.major, self.minor, self.patch, 0 if self.suffix else 1, self.suffix)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return base + self.suffix if self.suffix else base

    def __repr__(self) -> str:
        return f"Version({self})"


@lru_cache(maxsize=1024)
def _parse(text: str) -> Version:
    """Parsed once per string: versions are compared on every admission (a Version is never changed after)."""
    match = _VERSION.match(text.strip())
    if not match:
        raise ValueError(f"not a vLLM version: {text!r} (expected MAJOR.MINOR.PATCH, e.g. 0.30.0)")
    return Version(int(match[1]), int(match[2]), int(match[3]), match[4] or "")


T = TypeVar("T")


def newest_at(since: tuple[tuple[str, T], ...], version: Version | None) -> T:
    """The value of the newest (first version, value) entry starting at or before `version`: the oldest entry's for
    older versions, the newest entry's for an unknown version (None). `since` is ordered oldest first."""
    value = since[0][1]
    for first, candidate in since:
        if version is None or version >= Version.parse(first):
            value = candidate
    return value
