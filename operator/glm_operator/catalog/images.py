"""The image catalog: which vLLM version and platform an image runs, and which glmops patches it carries."""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from glm_operator.api.constants import Platform
from glm_operator.catalog.versions import Version


class PatchRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    platforms: tuple[Platform, ...]
    from_: str
    until: str | None = None

    def covers(self, platform: str, version: Version) -> bool:
        return (
            platform in self.platforms
            and version >= Version.parse(self.from_)
            and (self.until is None or version < Version.parse(self.until))
        )


class ImageInfo(BaseModel):
    """What glmops knows (or assumes) about one image reference."""

    model_config = ConfigDict(frozen=True)

    ref: str
    version: str | None
    platform: Platform | None
    patches: tuple[str, ...]
    known: bool
    patched: bool


@lru_cache(maxsize=32)
def _known_images(
    versions: tuple[str, ...],
    stock: tuple[tuple[str, str], ...],
    patched: tuple[tuple[str, str], ...],
    patches: tuple[tuple[str, PatchRange], ...],
) -> dict[str, ImageInfo]:
    """The images a catalog knows, from its content (hashable, so one admission does not rebuild them per rule)."""
    stock_refs, patched_refs = dict(stock), dict(patched)
    out: dict[str, ImageInfo] = {}
    for version in versions:
        parsed = Version.parse(version)
        for platform in Platform:
            ref = stock_refs[platform].format(version=version)
            out[ref] = ImageInfo(ref=ref, version=version, platform=platform, patches=(), known=True, patched=False)
            ref = patched_refs[platform].format(version=version)
            carried = tuple(name for name, rng in patches if rng.covers(platform, parsed))
            out[ref] = ImageInfo(ref=ref, version=version, platform=platform, patches=carried, known=True, patched=True)
    return out


class ImageCatalog(BaseModel):
    model_config = ConfigDict(frozen=True)

    versions: tuple[str, ...]
    default_version: str
    stock: dict[str, str]
    patched_images: dict[str, str]
    patches: dict[str, PatchRange]
    extra: dict[str, ImageInfo] = {}

    def patches_for(self, platform: str, version: str) -> tuple[str, ...]:
        v = Version.parse(version)
        return tuple(name for name, rng in self.patches.items() if rng.covers(platform, v))

    def newest_version(self) -> Version:
        """The newest vLLM version glmops has checked (every fact read from its source)."""
        return max(Version.parse(v) for v in self.versions)

    def judged_as(self, version: Version) -> str:
        """The checked version whose facts the rules use for `version`: the newest checked one at or below it (the
        oldest for a version below them all), as `Fact.at` picks."""
        below = [v for v in self.versions if Version.parse(v) <= version]
        return max(below, key=Version.parse) if below else min(self.versions, key=Version.parse)

    def patched_ref(self, platform: str, version: str) -> str:
        return self.patched_images[platform].format(version=version)

    def stock_ref(self, platform: str, version: str) -> str:
        return self.stock[platform].format(version=version)

    def with_patched_registry(self, registry: str) -> ImageCatalog:
        """This catalog with glmops' patched images in `registry` (where the operator builds them).

        The packaged references stay known (as extra images), so a deployment that names one
        explicitly is still judged by its real patches.
        """
        registry = registry.rstrip("/")
        moved = {p: f"{registry}/{ref.rsplit('/', 1)[-1]}" for p, ref in self.patched_images.items()}
        packaged = {ref: info for ref, info in self.known_images().items() if info.patched}
        return self.model_copy(update={"patched_images": moved, "extra": {**packaged, **self.extra}})

    def known_images(self) -> dict[str, ImageInfo]:
        """Every stock and patched image of the catalog's versions (computed once per catalog content)."""
        return _known_images(
            self.versions, tuple(self.stock.items()), tuple(self.patched_images.items()), tuple(self.patches.items())
        )

    def describe(self, ref: str) -> ImageInfo:
        """Catalog facts for a known image; for an unknown one, the version in its tag and no patches."""
        bare = ref.split("@", 1)[0]
        found = self.extra.get(bare) or self.known_images().get(bare)
        if found is not None:
            return found
        name, _, tag = bare.rpartition(":") if ":" in bare.rsplit("/", 1)[-1] else (bare, "", "")
        version = Version.from_tag(tag) if tag else None
        platform: Platform | None = Platform.ROCM if "rocm" in name.lower() else None
        return ImageInfo(
            ref=ref,
            version=str(version) if version else None,
            platform=platform,
            patches=(),
            known=False,
            patched=False,
        )


VERSIONS_FILE = "vllm-versions.yaml"
VERSIONS_PATH = "operator/glm_operator/catalog/data/" + VERSIONS_FILE


def render_versions_yaml(versions: tuple[str, ...]) -> str:
    """The supported versions as the operator reads them; the one list is the plugin's PROVEN_VERSIONS."""
    head = "# Generated by `glmctl generate` from images/vllm-patches version.PROVEN_VERSIONS; do not edit.\n"
    return head + "vllmVersions: [" + ", ".join(f'"{v}"' for v in versions) + "]\n"


def parse_images(text: str, versions_text: str) -> ImageCatalog:
    """The image catalog; its versions come from vllm-versions.yaml, generated from the plugin's proven versions."""
    raw = yaml.safe_load(text)
    return ImageCatalog(
        versions=tuple(yaml.safe_load(versions_text)["vllmVersions"]),
        default_version=raw["defaultVllmVersion"],
        stock=raw["stock"],
        patched_images=raw["patched"],
        patches={
            name: PatchRange(platforms=tuple(b["platforms"]), from_=b["from"], until=b.get("until"))
            for name, b in raw["patches"].items()
        },
    )


class ExtraImage(BaseModel):
    """An image a cluster adds to the catalog (e.g. a mirror of glmops' patched image)."""

    model_config = ConfigDict(extra="forbid")

    version: str
    platform: Platform
    patches: tuple[str, ...] = ()


def extra_images(raw: dict[str, object], catalog: ImageCatalog) -> dict[str, ImageInfo]:
    out = {}
    for ref, body in raw.items():
        entry = ExtraImage.model_validate(body)
        Version.parse(entry.version)
        unknown = set(entry.patches) - set(catalog.patches)
        if unknown:
            raise ValueError(f"image {ref}: unknown patches {sorted(unknown)}; known: {sorted(catalog.patches)}")
        out[ref] = ImageInfo(
            ref=ref,
            version=entry.version,
            platform=entry.platform,
            patches=entry.patches,
            known=True,
            patched=bool(entry.patches),
        )
    return out


@cache
def load_images() -> ImageCatalog:
    data = resources.files("glm_operator.catalog").joinpath("data")
    return parse_images(data.joinpath("images.yaml").read_text(), data.joinpath(VERSIONS_FILE).read_text())
