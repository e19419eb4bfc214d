"""glmops' vLLM plugin: patches for three silent GLM-5.x serving failures, and a null-content counter.

Entry point `glmops_vllm_patches = glmops_vllm_patches:register` in the `vllm.general_plugins` group.
Importing this package imports neither torch nor vLLM; `register()` does, when vLLM calls it.
"""

from glmops_vllm_patches.plugin import register

__all__ = ["register"]
