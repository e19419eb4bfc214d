"""Where `glmctl` reads manifests from: `-f FILE|DIR|-`, as kubectl expands it, with bounds.

Decisions, as kubectl makes them or a CI gate needs them:
- A directory is read for its `.yaml`, `.yml` and `.json` files in name order (kubectl's extensions,
  compared as written); its subdirectories only with `-R`, depth first in name order. Other files are
  passed over without a note: a manifests directory often holds a README or a kustomization's patches.
- Symbolic links are followed; a directory reached a second time (a link back to a parent, a loop) is
  read once and noted, so a loop costs one visit.
- A walk examines at most MAX_DIR_ENTRIES names and keeps at most MAX_FILES files in all: a directory of
  millions of files, or a `-R` from `/`, gets a short refusal that says how to narrow it, not a long wait.
- A directory without any manifest file is bad input, naming the directory and the fix (`-R` when it has
  subdirectories), so a CI gate never passes a path it read nothing from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

MANIFEST_EXTENSIONS = (".json", ".yaml", ".yml")
MAX_DIR_ENTRIES = 100_000
MAX_FILES = 10_000
STDIN = "-"


class SourceError(Exception):
    """A path given with `-f` that cannot be expanded into manifest files."""


@dataclass(frozen=True)
class Source:
    """One file to read; `directory` is the `-f` directory it was found in (None when named itself)."""

    path: str
    directory: str | None = None


@dataclass
class _Walk:
    recursive: bool
    notes: list[str]
    entries: int = 0
    seen_dirs: set[tuple[int, int]] = field(default_factory=set)
    files: list[Source] = field(default_factory=list)


def expand_sources(paths: list[str], recursive: bool, notes: list[str]) -> list[Source]:
    """The files to read, in order: each named file (or `-`) as given, each directory's manifest files."""
    walk = _Walk(recursive, notes)
    for path in paths:
        if path != STDIN and os.path.isdir(path):
            before = len(walk.files)
            _walk_directory(path, path, walk)
            if len(walk.files) == before:
                raise SourceError(_empty_directory(path, recursive))
        else:
            walk.files.append(Source(path))
        if len(walk.files) > MAX_FILES:
            raise SourceError(f"{path}: more than {MAX_FILES} manifest files in all; refused (name fewer files)")
    return walk.files


def _walk_directory(root: str, directory: str, walk: _Walk) -> None:
    """Depth first in name order, without recursion in Python (a deep tree cannot overflow the stack)."""
    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            key = _identity(current)
        except OSError as err:
            raise SourceError(f"{current}: cannot read: {err}") from err
        if key in walk.seen_dirs:
            walk.notes.append(f"{current}: skipped: a directory already read (a symbolic link back to it)")
            continue
        walk.seen_dirs.add(key)
        subdirectories = []
        for name, is_dir, is_file in _names(root, current, walk):
            path = os.path.join(current, name)
            if is_dir:
                subdirectories.append(path)
            elif is_file and name.endswith(MANIFEST_EXTENSIONS):
                walk.files.append(Source(path, root))
                if len(walk.files) > MAX_FILES:
                    raise SourceError(
                        f"{root}: more than {MAX_FILES} manifest files; refused (name a smaller directory)"
                    )
        if walk.recursive:
            stack.extend(reversed(subdirectories))


def _names(root: str, directory: str, walk: _Walk) -> list[tuple[str, bool, bool]]:
    """A directory's names sorted, each with whether it is a directory and whether a regular file."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                walk.entries += 1
                if walk.entries > MAX_DIR_ENTRIES:
                    raise SourceError(
                        f"{root}: more than {MAX_DIR_ENTRIES} names under it; refused (name a smaller directory, "
                        "or the files themselves)"
                    )
                found.append((entry.name, _is(entry.is_dir), _is(entry.is_file)))
    except OSError as err:
        raise SourceError(f"{directory}: cannot read: {err}") from err
    return sorted(found)


def _is(test: Callable[[], bool]) -> bool:
    """`DirEntry.is_dir()`/`is_file()`, following links; a broken or looping link is neither."""
    try:
        return test()
    except OSError:
        return False


def _identity(directory: str) -> tuple[int, int]:
    status = os.stat(directory)
    return status.st_dev, status.st_ino


def _empty_directory(path: str, recursive: bool) -> str:
    extensions = ", ".join(MANIFEST_EXTENSIONS)
    if recursive:
        return f"{path}: no manifest files ({extensions}) in it or below it"
    return f"{path}: no manifest files ({extensions}) in it; add -R to read its subdirectories too"
