"""Everything a rule needs, resolved once from a spec and the catalogs."""

from __future__ import annotations

from dataclasses import dataclass, field

from glm_operator.api import GLMDeploymentSpec
from glm_operator.catalog.accelerators import Accelerator
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import ImageInfo
from glm_operator.catalog.models import Lookup
from glm_operator.catalog.versions import Version

__all__ = ["Catalogs", "Context", "resolve"]


@dataclass(frozen=True)
class Context:
    """A spec with its catalog facts resolved: model, accelerator, image, vLLM version and patches."""

    spec: GLMDeploymentSpec
    catalogs: Catalogs
    accelerator: Accelerator
    model: Lookup | None
    image: ImageInfo
    version: Version | None  # None: unknown, so every version-bound rule assumes the worst
    image_explicit: bool
    # Env values glmops itself wrote earlier (from the remediation annotation): not the user's choice.
    owned_env: dict[str, str] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return self.accelerator.platform

    def has_patch(self, name: str) -> bool:
        return name in self.image.patches

    def version_in(self, low: str | None, high: str | None) -> bool:
        """Whether the vLLM version is in [low, high); an unknown version is assumed to be."""
        if self.version is None:
            return True
        return (low is None or self.version >= Version.parse(low)) and (
            high is None or self.version < Version.parse(high)
        )

    def env(self, name: str) -> str | None:
        return self.spec.engine.env_value(name)

    def env_index(self, name: str) -> int | None:
        return next((i for i, e in enumerate(self.spec.engine.env) if e.name == name), None)

    def env_is_users(self, name: str) -> bool:
        """True when the user set this variable themselves (glmops' own earlier repairs do not count)."""
        value = self.env(name)
        return value is not None and self.owned_env.get(name) != value

    def env_field(self, name: str) -> str:
        index = self.env_index(name)
        return f"spec.engine.env[{index}].value" if index is not None else "spec.engine.env"


def resolve(spec: GLMDeploymentSpec, catalogs: Catalogs, owned_env: dict[str, str] | None = None) -> Context:
    accelerator = catalogs.accelerators.get(spec.accelerator.type.value)
    engine = spec.engine
    if engine.image:
        image = catalogs.images.describe(engine.image)
        version_text = image.version or engine.vllm_version
    else:
        version_text = engine.vllm_version or catalogs.images.default_version
        image = ImageInfo(
            ref=catalogs.images.patched_ref(accelerator.platform, version_text),
            version=version_text,
            platform=accelerator.platform,
            patches=catalogs.images.patches_for(accelerator.platform, version_text),
            known=version_text in catalogs.images.versions,
            patched=True,
        )
    version = Version.parse(version_text) if version_text else None
    return Context(
        spec=spec,
        catalogs=catalogs,
        accelerator=accelerator,
        model=catalogs.models.lookup(spec.model.name),
        image=image,
        version=version,
        image_explicit=engine.image is not None,
        owned_env=dict(owned_env or {}),
    )
