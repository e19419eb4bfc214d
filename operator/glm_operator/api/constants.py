"""Contracts several modules share: a value written here is the one the renderer, the rules and the tests use."""

from __future__ import annotations

ROCM_AITER_ENV = "VLLM_ROCM_USE_AITER"
ROCM_AITER_RENDERED = "1"
"""The renderer sets VLLM_ROCM_USE_AITER=1 on ROCm unless the spec sets it (ROCm sparse MLA runs on AITER only), so
the rules read an unset master switch as on."""

SERVING_PORT = 8000
"""The port vLLM listens on in every serving pod: the Service, the probes and the canary all use it."""
