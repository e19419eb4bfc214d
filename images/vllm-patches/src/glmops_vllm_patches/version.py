"""vLLM version numbers as the guards compare them, and the range of versions this plugin supports."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A release number; a pre-release or dev build of X sorts just below X (it may lack X's changes)."""

    release: tuple[int, int, int]
    final: bool = True

    @classmethod
    def parse(cls, text: str) -> Version:
        m = _RELEASE.match(text.strip())
        if m is None:
            raise ValueError(f"not a vLLM version: {text!r}")
        major, minor, patch, rest = int(m[1]), int(m[2]), int(m[3] or 0), m[4]
        # "+cu130" is a local build tag of the same release; "rc1", ".dev5" are not the release yet.
        tail = rest.split("+", 1)[0]
        return cls((major, minor, patch), final=tail == "")

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return (self.release, self.final) < (other.release, other.final)

    def __str__(self) -> str:
        text = ".".join(str(p) for p in self.release)
        return text if self.final else text + " (pre-release)"


@dataclass(frozen=True)
class VersionRange:
    """Versions from `first` (inclusive) up to `until` (exclusive); `until=None` means every later version."""

    first: str
    until: str | None = None

    def __contains__(self, version: Version) -> bool:
        return Version.parse(self.first) <= version and (self.until is None or version < Version.parse(self.until))

    def __str__(self) -> str:
        return f">={self.first}" + (f",<{self.until}" if self.until else "")


# The versions whose sources the patches were written against and proven on (tests/plugin). A version outside
# this range gets no patch at all: the plugin does not guess at code it has not seen.
SUPPORTED = VersionRange("0.26.0", "0.35.0")
PROVEN_VERSIONS = ("0.26.0", "0.27.1", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
