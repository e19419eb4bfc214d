"""The accelerator catalog: what each GPU type is, how much memory it has and which nodes carry it."""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from glm_operator.api import AcceleratorType
from glm_operator.api.constants import Platform


class ArchFamily(StrEnum):
    """Architecture families the rules and the format table reason about (a closed set: a typo fails at load)."""

    SM90 = "sm90"
    SM100 = "sm100"
    SM120 = "sm120"
    GFX942 = "gfx942"
    GFX950 = "gfx950"


class Accelerator(BaseModel):
    """One GPU type."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    name: str
    vendor: Literal["nvidia", "amd"]
    platform: Platform
    architecture: str = Field(pattern=r"^(sm[0-9]+|gfx[0-9a-f]+)$")
    arch_family: ArchFamily
    compute_capability: str | None = None
    memory_gib: float = Field(gt=0, alias="memoryGiB")
    gpus_per_node: int = Field(ge=1, le=16)
    cpu_arch: Literal["amd64", "arm64"]
    resource_name: str
    node_selector: dict[str, list[str]]
    fleet_labels: dict[str, str] = Field(default_factory=dict)
    multi_node_nvlink: bool = Field(default=False, alias="multiNodeNVLink")

    @model_validator(mode="after")
    def _platform_matches_vendor(self) -> Accelerator:
        expected = {"nvidia": Platform.CUDA, "amd": Platform.ROCM}[self.vendor]
        if self.platform != expected:
            raise ValueError(f"{self.name}: vendor {self.vendor} runs platform {expected}, not {self.platform}")
        if not self.node_selector or any(not v for v in self.node_selector.values()):
            raise ValueError(f"{self.name}: nodeSelector needs at least one label with at least one value")
        return self


class AcceleratorCatalog(BaseModel):
    """All known GPU types, by the name used in spec.accelerator.type."""

    model_config = ConfigDict(frozen=True)

    accelerators: dict[str, Accelerator]

    def get(self, name: str) -> Accelerator:
        try:
            return self.accelerators[name]
        except KeyError:
            known = ", ".join(sorted(self.accelerators))
            raise KeyError(f"unknown accelerator type {name!r}; known types: {known}") from None

    def names(self) -> list[str]:
        return list(self.accelerators)


def parse_accelerators(text: str) -> AcceleratorCatalog:
    """Parse and validate catalog YAML text (the packaged file or a user's extension)."""
    raw = yaml.safe_load(text) or {}
    entries = raw.get("accelerators") or {}
    return AcceleratorCatalog(
        accelerators={name: Accelerator.model_validate({"name": name, **body}) for name, body in entries.items()}
    )


@cache
def load_accelerators() -> AcceleratorCatalog:
    """The packaged accelerator catalog; it covers exactly the API's AcceleratorType values."""
    text = resources.files("glm_operator.catalog").joinpath("data/accelerators.yaml").read_text()
    catalog = parse_accelerators(text)
    missing = {t.value for t in AcceleratorType} ^ set(catalog.accelerators)
    if missing:
        raise ValueError(f"accelerator catalog and API enum disagree on: {sorted(missing)}")
    return catalog
