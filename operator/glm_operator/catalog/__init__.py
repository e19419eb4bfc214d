"""Data about accelerators, models and images: plain YAML files in data/, loaded and validated here."""

from glm_operator.catalog.accelerators import Accelerator, AcceleratorCatalog, load_accelerators

__all__ = ["Accelerator", "AcceleratorCatalog", "load_accelerators"]
