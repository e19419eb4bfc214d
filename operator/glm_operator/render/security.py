"""The security context of the vLLM container: the tightest one vLLM serves under (docs/security.md).

vLLM needs no Linux capability, no privilege escalation and no system call outside the runtime's default
seccomp profile: every capability is dropped. It does write at run time (the Hugging Face cache, torch.compile,
Triton and FlashInfer caches under $HOME/.cache, and /tmp), so the root filesystem stays writable. The user is
the image's: the official vllm/vllm-openai images (and glmops' patched images built on them) declare no USER
and keep $HOME and the model cache under /root, so forcing another user breaks them; an image that runs as a
non-root user (glmops' CPU image runs as 65532) keeps its user.

Other settings add what they need through `extra_capabilities` (RDMA's IPC_LOCK, for example), never
by loosening the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SECCOMP_RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def vllm_security_context(extra_capabilities: Iterable[str] = ()) -> dict[str, Any]:
    """securityContext of a vLLM container: no escalation, no capabilities but `extra_capabilities`, seccomp."""
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    added = sorted({c.upper() for c in extra_capabilities})
    if added:
        capabilities["add"] = added
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": capabilities,
        "seccompProfile": dict(SECCOMP_RUNTIME_DEFAULT),
    }
