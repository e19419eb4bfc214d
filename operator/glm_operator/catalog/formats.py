"""Checkpoint formats and the accelerator architecture families that run them."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from glm_operator.catalog.accelerators import ArchFamily


class FormatInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    supported: tuple[ArchFamily, ...]
    warn: dict[ArchFamily, str] = {}
    why: str = ""
    refuse: dict[ArchFamily, str] = {}

    def why_not(self, family: ArchFamily) -> str:
        """Why this format does not run on an unsupported architecture family."""
        return self.refuse.get(family, self.why)


@cache
def load_formats() -> dict[str, FormatInfo]:
    raw = yaml.safe_load(resources.files("glm_operator.catalog").joinpath("data/formats.yaml").read_text())
    return {name: FormatInfo.model_validate({"name": name, **body}) for name, body in raw["formats"].items()}
