"""All catalogs together, as packaged or extended by a cluster's own catalog (a ConfigMap or a file).

An extension is YAML with optional sections `accelerators`, `models` and `images`, in the packaged
files' formats (`images` maps an image reference to {version, platform, patches}). Entries add to or
replace packaged ones. Accelerator names stay within the API's enum: a new GPU type also needs a CRD
change, so an unknown name is refused with that explanation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from pydantic import ValidationError

from glm_operator.api import AcceleratorType
from glm_operator.catalog.accelerators import Accelerator, AcceleratorCatalog, load_accelerators
from glm_operator.catalog.access_policy import AccessPolicy
from glm_operator.catalog.formats import FormatInfo, load_formats
from glm_operator.catalog.image_policy import ImagePolicy
from glm_operator.catalog.images import ImageCatalog, extra_images, load_images
from glm_operator.catalog.models import ModelCatalog, ModelInfo, load_models


class CatalogError(ValueError):
    """A catalog extension that cannot be used; the message says which entry and why."""


@dataclass(frozen=True)
class Catalogs:
    accelerators: AcceleratorCatalog
    models: ModelCatalog
    images: ImageCatalog
    formats: dict[str, FormatInfo]
    # The cluster's RDMA device resource (the chart's network.rdmaResource, GLMOPS_RDMA_RESOURCE), used for
    # spec.network.rdma without a resourceName. A fact about the cluster, like the accelerators' node labels.
    default_rdma_resource: str | None = None
    # The cluster's rule on user-named images (set by the administrator, never by a catalog extension).
    image_policy: ImagePolicy = field(default_factory=ImagePolicy)
    # The cluster's limits on pod volumes, ServiceAccounts and canary data (the administrator's, like image_policy).
    access_policy: AccessPolicy = field(default_factory=AccessPolicy)

    @classmethod
    def packaged(cls) -> Catalogs:
        return cls(load_accelerators(), load_models(), load_images(), load_formats())

    def extend(self, text: str, source: str = "catalog extension") -> Catalogs:
        """These catalogs with an extension's entries added; raises CatalogError naming the bad entry."""
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            raise CatalogError(f"{source}: not valid YAML: {err}") from err
        if not isinstance(raw, dict) or set(raw) - {"accelerators", "models", "images"}:
            raise CatalogError(f"{source}: expected a mapping with accelerators, models and/or images")
        out = self
        try:
            out = replace(out, accelerators=self._accelerators(raw.get("accelerators") or {}, source))
            out = replace(out, models=self._models(raw.get("models") or {}, source))
            out = replace(
                out,
                images=self.images.model_copy(
                    update={"extra": {**self.images.extra, **extra_images(raw.get("images") or {}, self.images)}}
                ),
            )
        except CatalogError:
            raise
        except (ValidationError, ValueError) as err:
            raise CatalogError(f"{source}: {err}") from err
        return out

    def _accelerators(self, entries: dict[str, Any], source: str) -> AcceleratorCatalog:
        allowed = {t.value for t in AcceleratorType}
        for name in entries:
            if name not in allowed:
                raise CatalogError(
                    f"{source}: accelerators.{name}: spec.accelerator.type only admits {sorted(allowed)}; "
                    "a new GPU type needs a glmops release that adds it to the CRD"
                )
        merged = dict(self.accelerators.accelerators)
        for name, body in entries.items():
            merged[name] = Accelerator.model_validate({"name": name, **body})
        return AcceleratorCatalog(accelerators=merged)

    def _models(self, entries: dict[str, Any], source: str) -> ModelCatalog:
        merged = dict(self.models.models)
        for name, body in entries.items():
            model = ModelInfo.model_validate({"name": name, **body})
            if model.format not in self.formats:
                raise CatalogError(f"{source}: models.{name}: unknown format {model.format}")
            merged[name] = model
        return ModelCatalog(models=merged)
