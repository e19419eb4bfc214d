"""Contracts several modules share: a value written here is the one the renderer, the rules and the tests use."""

from __future__ import annotations

ROCM_AITER_ENV = "VLLM_ROCM_USE_AITER"
ROCM_AITER_RENDERED = "1"
"""The renderer sets VLLM_ROCM_USE_AITER=1 on ROCm unless the spec sets it (ROCm sparse MLA runs on AITER only), so
the rules read an unset master switch as on."""

REPAIR_WEBHOOK_ID = "glmops-repair"
VALIDATE_WEBHOOK_ID = "glmops-validate"
"""kopf handler ids of the admission webhooks, and so the URL paths the webhook server answers on (/<id>)."""
