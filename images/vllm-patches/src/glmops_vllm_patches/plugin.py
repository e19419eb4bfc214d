"""`register()`: the vLLM general plugin entry point. Decides, per patch, apply or skip, and logs one line each.

vLLM calls general plugins once per process (API server, engine core, every worker) before the model is built,
and may call them again; `register()` is re-entrant: a patch applied once in a process is never applied twice.
A target missing in a supported version raises `PatchTargetMissing`, which vLLM does not catch around plugin
calls, so the server does not start serving answers the patch was meant to fix.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from glmops_vllm_patches.base import Context, Decision, Patch, resolve
from glmops_vllm_patches.registry import PATCHES
from glmops_vllm_patches.version import SUPPORTED, Version

# Under vLLM's "vllm" logger so the lines come out in vLLM's own log format and level settings.
log = logging.getLogger("vllm.glmops_patches")

PLATFORM_OVERRIDE = "GLMOPS_PATCH_PLATFORM"

_lock = threading.Lock()
_outcomes: dict[str, Outcome] = {}


@dataclass(frozen=True)
class Outcome:
    name: str
    applied: bool
    message: str


def register() -> None:
    """Entry point of the `vllm.general_plugins` group."""
    apply_patches()


def apply_patches(ctx: Context | None = None, patches: tuple[Patch, ...] = PATCHES) -> dict[str, Outcome]:
    """Apply every patch its guard allows; return what happened to each (also on repeated calls)."""
    with _lock:
        if ctx is None:
            ctx = current_context()
        if ctx.version not in SUPPORTED:
            for patch in patches:
                _record(patch, Decision(False, f"vLLM {ctx.version} is not a supported version ({SUPPORTED})"))
            return dict(_outcomes)
        for patch in patches:
            if patch.info.name in _outcomes:
                continue
            decision = patch.decide(ctx)
            if not decision.apply:
                _record(patch, decision)
                continue
            found = {t: resolve(t) for t in patch.targets(ctx)}
            _record(patch, Decision(True, patch.apply(ctx, found)))
        return dict(_outcomes)


def _record(patch: Patch, decision: Decision) -> None:
    info = patch.info
    outcome = Outcome(info.name, decision.apply, decision.reason)
    _outcomes[info.name] = outcome
    verb = "applied" if decision.apply else "skipped"
    line = ("glmops patch %s (%s) %s: %s", info.name, info.issue, verb, decision.reason)
    log.info(*line)
    if not (log.isEnabledFor(logging.INFO) and log.hasHandlers()):
        # vLLM configures its logging only after parsing the command line, and the API server loads general plugins
        # while building its parser (0.32.0): the line above goes nowhere there, so it goes to stderr as vLLM's would.
        print(f"(pid={os.getpid()}) INFO [glmops_vllm_patches] {line[0] % line[1:]}", file=sys.stderr, flush=True)


def current_context(env: Mapping[str, str] | None = None) -> Context:
    """The running vLLM's version and platform; GLMOPS_PATCH_PLATFORM overrides the platform (diagnostics)."""
    env = dict(os.environ if env is None else env)
    from vllm import __version__ as vllm_version

    platform = env.get(PLATFORM_OVERRIDE) or _detect_platform()
    return Context(version=Version.parse(vllm_version), platform=platform, env=env)


def _detect_platform() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_rocm():
        return "rocm"
    return str(getattr(current_platform, "device_type", "") or "unspecified")


def forget() -> None:
    """Forget what this process recorded (tests only: it does not undo a patch already applied)."""
    with _lock:
        _outcomes.clear()


def outcomes() -> dict[str, Outcome]:
    """What this process did so far (for tests and for the metrics patch's info gauge)."""
    with _lock:
        return dict(_outcomes)
