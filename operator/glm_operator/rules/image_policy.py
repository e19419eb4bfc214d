"""The cluster's image policy at admission: an image a user names must be one the policy allows.

Images glmops picks (no `spec.engine.image`), and images the catalogs know (the packaged ones, the cluster's
catalog extension, the patched images glmops builds into its registry) are always allowed: an administrator
curates those. Anything else needs `imagePolicy.allowCustomImages` and, when `allowedRepositories` is set, a
repository under one of its prefixes.
"""

from __future__ import annotations

from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding

RULE = "policy/image"


def image_policy_findings(ctx: Context) -> list[Finding]:
    """An error on spec.engine.image when the cluster's image policy does not allow it."""
    ref = ctx.spec.engine.image
    policy = ctx.catalogs.image_policy
    if ref is None or ctx.image.known or policy.allows_custom(ref):
        return []
    if not policy.allow_custom_images:
        problem = f"the cluster's image policy allows only images glmops catalogs ({policy.describe()})"
        where = ""
    else:
        problem = f"the cluster's image policy does not allow this repository ({policy.describe()})"
        where = f", or an image under one of {', '.join(policy.allowed_repositories)}"
    versions = ", ".join(ctx.catalogs.images.versions)
    return [
        Finding(
            rule=RULE,
            severity="error",
            field="spec.engine.image",
            value=ref,
            problem=problem,
            fix=(
                f"Remove spec.engine.image and set spec.engine.vllmVersion (one of {versions}) to run glmops' "
                f"catalogued image{where}; or ask the cluster's administrator to change imagePolicy"
            ),
        )
    ]
