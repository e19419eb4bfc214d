"""The patch registry as Markdown (docs/patches.md, written by `glmctl generate`)."""

from __future__ import annotations

from glmops_vllm_patches.registry import PATCHES
from glmops_vllm_patches.version import PROVEN_VERSIONS, SUPPORTED

_HEAD = """# vLLM patches

Generated from the plugin's registry (`images/vllm-patches/src/glmops_vllm_patches/`) by `glmctl generate`;
do not edit by hand.

The plugin `glmops_vllm_patches` (entry point group `vllm.general_plugins`) is installed in glmops' patched
images. vLLM calls it in every process before the model is built; it applies each patch whose guard allows it
and logs one line per patch (`glmops patch <name> (<issue>) applied|skipped: <why>`). A target missing in a
supported version stops the server: it does not start serving answers the patch was meant to fix.

Supported vLLM versions: {supported}; proven against the sources of {proven}.
Turn one patch off with its switch (`=off`); `VLLM_PLUGINS` without `glmops_vllm_patches` turns all off.

"""


def render_registry_md() -> str:
    out = [_HEAD.format(supported=SUPPORTED, proven=", ".join(PROVEN_VERSIONS))]
    out.append("| patch | issue | vLLM | platforms | switch |\n|---|---|---|---|---|\n")
    for p in PATCHES:
        i = p.info
        out.append(
            f"| [{i.name}](#{i.name}) | [{i.issue}]({i.issue_url}) | {i.affected} | {', '.join(i.platforms)} "
            f"| `{i.env_switch}=off` |\n"
        )
    for p in PATCHES:
        i = p.info
        prs = ", ".join(i.prs) if i.prs else "none"
        out.append(
            f"\n## {i.name}\n\n"
            f"- Upstream: {i.issue_url} (pull requests: {prs})\n"
            f"- Affected: vLLM {i.affected} on {', '.join(i.platforms)}\n"
            f"- Why: {i.why}\n"
            f"- How: {i.how}\n"
            f"- Remove when: {i.remove_when}\n"
        )
    return "".join(out)
