"""What a patch is: its registry entry, the vLLM objects it needs, and how it decides to apply or skip."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from glmops_vllm_patches.version import Version, VersionRange


class PatchTargetMissing(RuntimeError):
    """A vLLM object a patch needs is missing in a version the plugin claims to support: refuse to serve."""


@dataclass(frozen=True)
class PatchInfo:
    """The registry entry: why the patch exists, what it does, and when it can go."""

    name: str
    issue: str
    issue_url: str
    prs: tuple[str, ...]
    why: str
    how: str
    affected: VersionRange
    platforms: tuple[str, ...]
    remove_when: str

    @property
    def env_switch(self) -> str:
        """`GLMOPS_PATCH_<NAME>=off` turns this patch off."""
        return "GLMOPS_PATCH_" + self.name.upper().replace("-", "_")


@dataclass(frozen=True)
class Target:
    """A vLLM object a patch reads or replaces: `module` and a dotted `qualname` inside it.

    `params` are the parameter names the patch relies on when it is a function or method; they are checked at
    run time (inspect) and against the source tree (ast), so a renamed argument fails loudly, not silently.
    """

    module: str
    qualname: str
    params: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.module}::{self.qualname}"


@dataclass(frozen=True)
class Context:
    """What a guard looks at: the running vLLM version, the platform and the environment."""

    version: Version
    platform: str  # "cuda", "rocm" or something else ("cpu", "unspecified", ...)
    env: Mapping[str, str] = field(default_factory=dict)

    def switch_off(self, name: str) -> bool:
        return self.env.get(name, "").strip().lower() in {"0", "off", "false", "no", "disable", "disabled"}


@dataclass(frozen=True)
class Decision:
    apply: bool
    reason: str


@dataclass(frozen=True)
class Patch:
    """A registry entry plus its code.

    `targets(ctx)` lists what the patch needs in this version; `apply(ctx, found)` changes vLLM and returns one
    line saying what it did; `skip(ctx)` may add a patch-specific reason to skip (None: apply).
    """

    info: PatchInfo
    targets: Callable[[Context], tuple[Target, ...]]
    apply: Callable[[Context, Mapping[Target, Any]], str]
    skip: Callable[[Context], str | None] = lambda ctx: None

    def decide(self, ctx: Context) -> Decision:
        info = self.info
        if ctx.switch_off(info.env_switch):
            return Decision(False, f"turned off by {info.env_switch}")
        if ctx.version not in info.affected:
            return Decision(False, f"vLLM {ctx.version} is outside the affected range {info.affected}")
        if ctx.platform not in info.platforms:
            return Decision(False, f"platform {ctx.platform} is not affected (only {', '.join(info.platforms)})")
        reason = self.skip(ctx)
        if reason is not None:
            return Decision(False, reason)
        return Decision(True, "affected")


def resolve(target: Target) -> Any:
    """Import the module and walk the qualname; raise PatchTargetMissing naming exactly what is missing."""
    try:
        obj: Any = importlib.import_module(target.module)
    except ImportError as exc:
        raise PatchTargetMissing(f"{target}: module does not import ({exc})") from exc
    for part in target.qualname.split("."):
        # Read class attributes from __dict__ where possible, so a staticmethod stays a staticmethod.
        holder = obj
        obj = inspect.getattr_static(holder, part, _MISSING)
        if obj is _MISSING:
            raise PatchTargetMissing(f"{target}: {part!r} not found")
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
    if target.params:
        _check_params(target, obj)
    return obj


def _check_params(target: Target, func: Any) -> None:
    try:
        names = set(inspect.signature(func).parameters)
    except (TypeError, ValueError) as exc:
        raise PatchTargetMissing(f"{target}: not a function ({exc})") from exc
    missing = [p for p in target.params if p not in names]
    if missing:
        raise PatchTargetMissing(f"{target}: parameter(s) {', '.join(missing)} not found")


_MISSING = object()

# Every wrapper a patch installs carries this attribute (the patch's name), so a second apply in the same
# process (vLLM may load general plugins more than once) recognises its own work and never wraps twice.
MARK = "__glmops_patch__"


def mark(func: Callable[..., Any], patch: str) -> Callable[..., Any]:
    setattr(func, MARK, patch)
    return func


def marked(obj: Any, patch: str) -> bool:
    """True when `obj` (a function, or a static/class method around one) is a wrapper of `patch`."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return bool(getattr(obj, MARK, None) == patch)


def install(cls: type, attr: str, new: Any, patch: str) -> bool:
    """Set `cls.attr = new` unless `patch` already did; True when it was set."""
    if marked(inspect.getattr_static(cls, attr, None), patch):
        return False
    setattr(cls, attr, new)
    return True
