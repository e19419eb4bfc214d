"""Catalog extensions (ConfigMap or file): what they may add, and how a bad one is reported."""

from __future__ import annotations

import threading
import time

import pytest

from glm_operator.catalog.bundle import CatalogError, Catalogs
from glm_operator.cli.main import main
from glm_operator.k8s.catalog import CatalogSource
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

EXTENSION = """
models:
  acme/GLM-5.3-ft:
    family: GLM-5.3
    architecture: GlmMoeDsaForCausalLM
    format: fp8
    layers: 78
    firstKDenseReplace: 3
    indexTopk: 2048
    indexTopkFreq: 4
    indexSkipTopkOffset: 3
    mtpLayers: 1
    weightGB: 756
    expertFraction: 0.96
images:
  mirror.acme.example/vllm:v0.30.0: {version: 0.30.0, platform: cuda, patches: [dsa-pp-topk-handoff]}
"""


def test_an_extended_model_is_judged_by_the_rules() -> None:
    catalogs = Catalogs.packaged().extend(EXTENSION)
    obj = B().model("acme/GLM-5.3-ft").accelerator("H200").pipeline(2).tensor(4).image("vllm/vllm-openai:v0.30.0")
    result = admit(obj.remediation("Reject").build(), catalogs)
    assert [f.rule for f in result.errors] == ["vllm-63170"]
    unknown = admit(obj.build(), Catalogs.packaged())
    assert any("not in the model catalog" in f.message for f in unknown.warnings)


def test_an_extended_image_carries_its_patches() -> None:
    catalogs = Catalogs.packaged().extend(EXTENSION)
    obj = B().accelerator("H200").pipeline(2).tensor(4).image("mirror.acme.example/vllm:v0.30.0").remediation("Reject")
    assert admit(obj.build(), catalogs).allowed


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("accelerators: {A100: {}}", "accelerators.A100: spec.accelerator.type only admits"),
        ("models: {x/y: {family: f}}", "Field required"),
        ("images: {r/i:v1: {version: 0.30.0, platform: cuda, patches: [nope]}}", "unknown patches ['nope']"),
        ("widgets: {}", "expected a mapping with accelerators, models and/or images"),
        ("models: [unclosed", "not valid YAML"),
        ("accelerators: {H200: {archFamily: sm10}}", "archFamily\n  Input should be 'sm90', 'sm100'"),
    ],
)
def test_a_bad_extension_names_the_entry(text: str, fragment: str) -> None:
    with pytest.raises(CatalogError, match="configmap ns/cm") as err:
        Catalogs.packaged().extend(text, source="configmap ns/cm")
    assert fragment in str(err.value)


def test_catalog_source_ignores_a_broken_extension_and_says_why() -> None:
    source = CatalogSource("ns/cm", reader=lambda ns, name: "widgets: {}", ttl_seconds=0)
    assert source.get().models == Catalogs.packaged().models
    assert source.last_error is not None and "expected a mapping" in source.last_error


def test_catalog_source_keeps_the_last_good_extension_when_a_new_one_breaks() -> None:
    texts = iter([EXTENSION, "widgets: {}", EXTENSION])
    source = CatalogSource("ns/cm", reader=lambda ns, name: next(texts), ttl_seconds=0)
    assert source.get().models.lookup("acme/GLM-5.3-ft") is not None and source.last_error is None
    assert source.get().models.lookup("acme/GLM-5.3-ft") is not None and source.last_error is not None
    source.get()
    assert source.last_error is None


def test_catalog_source_rereads_after_its_ttl() -> None:
    texts = iter([None, EXTENSION])
    source = CatalogSource("ns/cm", reader=lambda ns, name: next(texts), ttl_seconds=0)
    assert source.get().models.lookup("acme/GLM-5.3-ft") is None
    assert source.get().models.lookup("acme/GLM-5.3-ft") is not None


def test_without_a_configmap_the_catalogs_are_built_once() -> None:
    """Nothing to re-read: the same catalogs for good (the admission cache keys on them, and a rebuild costs a
    parse of the packaged YAML inside a review)."""
    source = CatalogSource(None, ttl_seconds=0)
    assert source.get() is source.get()


def test_a_configmap_that_cannot_be_read_keeps_the_last_good_catalogs_unreported() -> None:
    """The API server refusing or not answering is not the extension's fault: no error on every GLMDeployment,
    the last good catalogs stay, and the next read after the TTL takes the ConfigMap again."""

    def reader(texts: list[object]) -> object:
        def read(_ns: str, _name: str) -> str | None:
            text = texts.pop(0)
            if isinstance(text, Exception):
                raise text
            return text  # type: ignore[return-value]

        return read

    source = CatalogSource("ns/cm", reader=reader([EXTENSION, ConnectionError("refused"), None]), ttl_seconds=0)  # type: ignore[arg-type]
    assert source.get().models.lookup("acme/GLM-5.3-ft") is not None
    assert source.get().models.lookup("acme/GLM-5.3-ft") is not None and source.last_error is None
    assert source.get().models.lookup("acme/GLM-5.3-ft") is None  # read again: the extension was removed
    first = CatalogSource("ns/cm", reader=reader([TimeoutError("no answer")]), ttl_seconds=0)  # type: ignore[arg-type]
    assert first.get().models == Catalogs.packaged().models and first.last_error is None


def test_in_the_background_a_stale_configmap_is_read_without_holding_the_caller() -> None:
    """The operator's source: `get` answers at once with what it has while a re-read waits on the API server."""
    release = threading.Event()
    reads: list[float] = []

    def slow(_ns: str, _name: str) -> str | None:
        reads.append(time.monotonic())
        if len(reads) > 1:
            assert release.wait(10)
            return EXTENSION
        return None

    source = CatalogSource("ns/cm", reader=slow, ttl_seconds=0, background=True)
    first = source.get()  # nothing cached yet: read here
    assert first.models.lookup("acme/GLM-5.3-ft") is None
    start = time.monotonic()
    assert source.get() is first and source.get() is first  # stale: the re-read started, the callers not held
    assert time.monotonic() - start < 1
    while len(reads) < 2:  # the re-read's thread has started
        assert time.monotonic() - start < 10, "no re-read was started"
        time.sleep(0.01)
    source.get()
    time.sleep(0.05)
    assert len(reads) == 2  # one re-read at a time
    release.set()
    deadline = time.monotonic() + 10
    while source.get().models.lookup("acme/GLM-5.3-ft") is None:
        assert time.monotonic() < deadline, "the background read never took effect"
        time.sleep(0.01)


def test_glmctl_validate_takes_catalog_files(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    ext = tmp_path / "catalog.yaml"
    ext.write_text(EXTENSION)
    manifest = tmp_path / "m.yaml"
    import yaml

    manifest.write_text(yaml.safe_dump(B().model("acme/GLM-5.3-ft").accelerator("H200").tensor(8).build()))
    assert main(["validate", "--catalog", str(ext), str(manifest)]) == 0
    assert "not in the model catalog" not in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("widgets: {}")
    assert main(["validate", "--catalog", str(bad), str(manifest)]) == 2
