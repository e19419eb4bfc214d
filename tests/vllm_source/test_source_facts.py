"""Every fact glmops' rules take from vLLM, read back from the real source of every supported version.

The sources are the PyPI wheels unpacked by `hack/vllm-sources.sh` (`make test` fetches them first);
`GLMOPS_VLLM_SRC` points elsewhere. `GLMOPS_VLLM_SRC_AS=0.33.0=0.32.0` reads one version's source in place of
another's: the way to see these tests fail where a fact moved (a new version is checked the same way).
Where each fact is stated is data (catalog/data/vllm-fact-locations.yaml, written by
`python -m tests.vllm_source.locate`); its values are hand-written in vllm_facts.py. Both are checked here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.images import load_images
from glm_operator.catalog.models import load_models
from glm_operator.catalog.versions import Version
from glm_operator.rules.partition import vllm_default_split
from tests.vllm_source import extract, locate
from tests.vllm_source.extract import Source

VERSIONS = load_images().versions
SRC_ROOT = Path(os.environ.get("GLMOPS_VLLM_SRC", Path.home() / ".cache" / "glmops" / "vllm-src"))


def _substitutes() -> dict[str, str]:
    pairs = [p for p in os.environ.get("GLMOPS_VLLM_SRC_AS", "").split(",") if p]
    return dict(p.split("=", 1) for p in pairs)


_SOURCES: dict[str, Source] = {}


def source(version: str) -> Source:
    read = _substitutes().get(version, version)
    root = SRC_ROOT / read / "vllm"
    if not (SRC_ROOT / read / ".complete").exists():
        message = f"no vLLM {read} source in {SRC_ROOT} (run hack/vllm-sources.sh {read})"
        if os.environ.get("GLMOPS_REQUIRE_VLLM_SRC"):
            pytest.fail(message)
        pytest.skip(message)
    return _SOURCES.setdefault(read, Source(root))


READERS: dict[str, Callable[[Source], tuple[Any, str]]] = {
    facts.ALL2ALL_BACKENDS.id: extract.all2all_backends,
    facts.ALL2ALL_CLI_REMOVED.id: extract.all2all_cli_removed,
    facts.ALL2ALL_REWRITTEN.id: extract.all2all_rewritten,
    facts.ALL2ALL_DEFAULT.id: extract.all2all_default,
    facts.MOE_BACKENDS.id: extract.moe_backends,
    facts.ATTENTION_BACKENDS.id: extract.attention_backends,
    facts.KV_CACHE_DTYPES.id: extract.kv_cache_dtypes,
    facts.MOE_USE_EP.id: extract.moe_use_ep,
    facts.MOE_ALL2ALL_KERNELS.id: extract.moe_all2all_kernels,
    facts.MOE_SEQUENCE_PARALLEL_NEEDS.id: extract.moe_sequence_parallel,
    facts.MOE_BATCHED_ALL2ALL.id: extract.moe_batched_all2all,
    facts.MOE_PADDED_ALL2ALL.id: extract.moe_padded_all2all,
    facts.CUTLASS_MXFP4_REJECTED_ALL2ALL.id: extract.cutlass_mxfp4_rejected_all2all,
    facts.CUTLASS_MXFP4_REMAPS.id: extract.cutlass_mxfp4_remaps,
    facts.MARLIN_REJECTED_ALL2ALL.id: extract.marlin_rejected_all2all,
    facts.MARLIN_NEEDS_CUDA.id: extract.marlin_needs_cuda,
    facts.CT_MXFP4_EXPERTS.id: extract.ct_mxfp4_experts,
    facts.CT_MXFP4_MOE_BACKENDS_READ.id: extract.ct_mxfp4_moe_backends_read,
    facts.MODELOPT_NVFP4_HOPPER.id: extract.modelopt_nvfp4_min_capability,
    facts.AITER_SWITCH_DEFAULTS.id: extract.aiter_switch_defaults,
    facts.AITER_BMM_NEEDS_MASTER.id: extract.aiter_bmm_needs_master,
    facts.AITER_BMM_ARCH.id: extract.aiter_bmm_arch,
    facts.MLA_FP4BMM_NEEDS_BF16.id: extract.mla_fp4bmm_needs_bf16,
    facts.PP_DEFAULT_SPLIT.id: extract.pp_partition_checks,
    facts.DSA_TOPK_REUSE.id: lambda src: _dsa_defaults(src),
    facts.DSA_TOPK_PATTERN.id: extract.dsa_topk_pattern,
    facts.DSA_PP_TOPK_SENT.id: extract.dsa_pp_topk_sent,
    facts.HTTP_KEEP_ALIVE_S.id: extract.http_keep_alive,
    facts.NGRAM_LOOKUP_DEFAULTS.id: extract.ngram_lookup_defaults,
    facts.PROMETHEUS_METRICS.id: extract.prometheus_metrics,
}
FACTS = {f.id: f for f in facts.FACTS}


def _dsa_defaults(src: Source) -> tuple[Any, str]:
    found = list(extract.dsa_reuse_rules(src))
    defaults = {d for _where, _skips, d in found}
    assert len(defaults) == 1, f"the DSA modules disagree on the defaults: {defaults}"
    return defaults.pop(), ", ".join(where for where, _skips, _d in found)


def test_every_fact_has_a_reader_and_a_location_for_every_supported_version() -> None:
    unread, gone = sorted(set(FACTS) - set(READERS)), sorted(set(READERS) - set(FACTS))
    assert not unread, f"facts without a reader: {unread}: add one to extract.py and list it in READERS here"
    assert not gone, f"READERS for facts not in vllm_facts.FACTS: {gone}"
    for fact in facts.FACTS:
        assert set(fact.where) == set(VERSIONS), (
            f"{fact.id}: locations for {sorted(fact.where)}, catalog {VERSIONS} (run {locate.COMMAND})"
        )
        assert fact.since[0][0] == min(VERSIONS, key=Version.parse), f"{fact.id} does not start at the oldest version"
    assert set(facts.fact_locations()) == set(FACTS), f"{locate.LOCATIONS_PATH.name} is stale: run {locate.COMMAND}"


def test_the_locations_file_is_where_every_version_states_each_fact() -> None:
    """vllm-fact-locations.yaml, as committed, is exactly what locate writes from the source of every version:
    where each fact is stated, and the lines the start-up refusals cite."""
    try:
        found = locate.locate(READERS, VERSIONS, source)
    except locate.LocateError as err:
        pytest.fail(f"{err} (so {locate.COMMAND} cannot write it either)")
    recorded = facts.fact_locations()
    moved = [
        f"{fact_id} in vLLM {version}: now at {where!r}, recorded {recorded.get(fact_id, {}).get(version)!r}"
        for fact_id, per_version in found.items()
        for version, where in per_version.items()
        if recorded.get(fact_id, {}).get(version) != where
    ]
    try:
        lines = locate.locate_lines(extract.LINE_READERS, VERSIONS, source)
    except locate.LocateError as err:
        pytest.fail(f"{err} (so {locate.COMMAND} cannot write it either)")
    moved += [
        f"lines {name} in vLLM {version}: now {list(at)}, recorded {list(facts.source_lines(name).get(version, ()))}"
        for name, per_version in lines.items()
        for version, at in per_version.items()
        if facts.source_lines(name).get(version) != at
    ]
    assert not moved, "\n".join([*moved, f"run {locate.COMMAND} to record where they are now"])
    committed = locate.LOCATIONS_PATH.read_text()
    assert committed == locate.render(found, lines), (
        f"{locate.LOCATIONS_PATH.name} is not as written: run {locate.COMMAND}"
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fact_id", sorted(FACTS))
def test_fact_holds_in_the_source_of(fact_id: str, version: str) -> None:
    fact = FACTS[fact_id]
    value, where = READERS[fact_id](source(version))
    expected = fact.at(Version.parse(version))
    assert value == expected, (
        f"{fact_id} in vLLM {version} ({where}): source says {value!r}, glmops records {expected!r}"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_vllm_default_pp_split_is_ours_for_every_layer_count(version: str) -> None:
    split, where = extract.pp_split_function(source(version))
    for layers in range(1, 97):
        for pp in range(1, min(layers, 12) + 1):
            assert split(layers, pp, None) == vllm_default_split(layers, pp), f"{layers} layers, PP{pp} ({where})"
    assert split(78, 2, "38,40") == [38, 40]  # an explicit partition is taken as given


@pytest.mark.parametrize("version", VERSIONS)
def test_every_dsa_module_reuses_top_k_exactly_where_the_catalog_says(version: str) -> None:
    found = list(extract.dsa_reuse_rules(source(version)))
    assert found, "no top-k reuse rule found in the GLM-5.x modules"
    models = [m for m in load_models().models.values() if m.architecture == "GlmMoeDsaForCausalLM"]
    for where, skips, _defaults in found:
        for model in models:
            for layer in range(model.layers):
                reuses = skips(layer, model.index_topk_freq, model.index_skip_topk_offset)
                assert reuses == (not model.computes_topk(layer)), f"{model.name} layer {layer} at {where}"


def test_switch_parsing_matches_vllm_on_the_spellings_users_write() -> None:
    for value, on in (
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("0", False),
        ("false", False),
        ("False", False),
        ("no", False),
        ("", False),
        (" 1", False),
        ("yes", False),
    ):
        assert facts.switch_is_on(value, default=True) is on, value
    assert facts.switch_is_on(None, default=True) is True
    assert facts.switch_is_on(None, default=False) is False


def test_locate_names_the_version_whose_source_is_missing(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("GLMOPS_VLLM_SRC", str(tmp_path))
    before = locate.LOCATIONS_PATH.read_text()
    assert locate.main() == 1
    assert f"vLLM {VERSIONS[0]}: no source in {tmp_path}" in capsys.readouterr().err
    assert locate.LOCATIONS_PATH.read_text() == before


def test_locate_names_the_fact_a_reader_cannot_read(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    for version in VERSIONS:  # a source that exists but states nothing: the first reader fails, nothing is skipped
        (tmp_path / version / "vllm").mkdir(parents=True)
        (tmp_path / version / ".complete").touch()
    monkeypatch.setenv("GLMOPS_VLLM_SRC", str(tmp_path))
    before = locate.LOCATIONS_PATH.read_text()
    assert locate.main() == 1
    first = next(iter(READERS))
    assert f"{first} in vLLM {VERSIONS[0]}: LookupError" in capsys.readouterr().err
    assert locate.LOCATIONS_PATH.read_text() == before
