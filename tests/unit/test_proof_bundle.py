"""The offline bundle for the real-kernel proof (images/vllm-patches/proof/bundle.py): which CUDA images it keeps, how
it rewrites a fat binary inside a shared object and the vLLM wheel around it, and the wheels it pins.

Built on synthetic ELF files, fat binaries and wheels, so it runs anywhere; the pruned wheel itself ran the PP=1
proof on an H200 (images/vllm-patches/proof/results/pp1-one-gpu/).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import struct
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.proof import PROOF, load_proof_module

bundle = load_proof_module("bundle")
PTX, CUBIN = bundle.KIND_PTX, bundle.KIND_CUBIN


def image(kind: int, arch: int, payload: bytes) -> bytes:
    """One fat-binary image: a 64-byte header (kind, version, header size, payload size, arch at 28), the payload."""
    payload += bytes(-len(payload) % 8)
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 28, arch)
    return bytes(head) + payload


def fatbin(*images: bytes) -> bytes:
    body = b"".join(images)
    return struct.pack("<IHHQ", bundle.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf(sections: dict[str, bytes]) -> bytes:
    """A 64-bit little-endian ELF holding these sections (and its section-name table)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    data, offsets, pos = b"", [], 64
    for body in [*sections.values(), names]:
        offsets.append(pos + len(data))
        data += body + bytes(-len(body) % 8)
    shoff = 64 + len(data)
    headers = [bytes(64)]
    name_at = 1
    for (name, body), offset in zip([*sections.items(), (".shstrtab", names)], offsets, strict=True):
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset, len(body), 0, 0, 8, 0))
        name_at += len(name) + 1
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    head = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers), len(headers) - 1)
    return head + data + b"".join(headers)


SM80 = image(CUBIN, 80, b"sm80-cubin" * 10)
SM90 = image(CUBIN, 90, b"sm90-cubin" * 3)
SM100 = image(CUBIN, 100, b"sm100" * 7)
PTX80 = image(PTX, 80, b".version 8.0 ptx" * 4)


@pytest.mark.parametrize(
    ("images", "kept"),
    [
        ([SM80, SM90, SM100, PTX80], [SM90]),  # the cubin an H200 loads; PTX is never picked over it
        ([PTX80, SM80], []),  # would have run JIT-compiled PTX on an H200: emptied, so it fails loudly
        ([SM100], []),
        ([SM90, image(CUBIN, 90, b"second")], [SM90, image(CUBIN, 90, b"second")]),
    ],
)
def test_a_module_keeps_exactly_its_sm90_cubins(images: list[bytes], kept: list[bytes]) -> None:
    blob = fatbin(*images)
    _, _, parsed = bundle.images_of(blob, 0)
    chosen = bundle.keep_for(parsed)
    assert [blob[i.start : i.start + i.length] for i in chosen] == kept


def test_pruning_a_section_keeps_each_fat_binary_where_its_wrapper_points_and_zeroes_the_rest() -> None:
    first, second = fatbin(SM80, SM90, PTX80), fatbin(PTX80, SM100)
    section = bytearray(first + bytes(8) + second)  # fat binaries may be padded apart
    stats = bundle.PruneStats()
    bundle.prune_fatbin_section(section, stats)
    assert len(section) == len(first) + 8 + len(second)
    _, size, images = bundle.images_of(section, 0)
    assert size == len(SM90) and [section[i.start : i.start + i.length] for i in images] == [SM90]
    assert section[16 + len(SM90) : len(first) + 8] == bytes(len(first) + 8 - 16 - len(SM90))
    _, size, images = bundle.images_of(section, len(first) + 8)
    assert (size, images) == (0, [])
    assert stats.modules == 2 and stats.emptied_modules == 1
    assert stats.kept == {"sm_90": len(SM90)}
    assert stats.removed == {"sm_80": len(SM80), "compute_80": 2 * len(PTX80), "sm_100": len(SM100)}


def test_a_malformed_fat_binary_is_refused_rather_than_rewritten() -> None:
    blob = bytearray(fatbin(SM90))
    struct.pack_into("<Q", blob, 8, len(SM90) - 8)  # the header claims less than its image holds
    with pytest.raises(ValueError, match="malformed"):
        bundle.prune_fatbin_section(blob, bundle.PruneStats())


def test_only_the_fat_binary_section_of_a_shared_object_changes() -> None:
    code = b"\x90" * 40
    so = elf({".text": code, ".nv_fatbin": fatbin(SM80, SM90)})
    stats = bundle.PruneStats()
    pruned = bundle.prune_shared_object(so, stats)
    offset, size = bundle.elf_section(so, ".nv_fatbin")
    assert len(pruned) == len(so) and pruned[:offset] == so[:offset] and pruned[offset + size :] == so[offset + size :]
    assert bundle.elf_section(pruned, ".text") == bundle.elf_section(so, ".text")
    _, _, images = bundle.images_of(pruned, offset)
    assert [(i.kind, i.arch) for i in images] == [(CUBIN, 90)]
    plain = elf({".text": code})
    assert bundle.prune_shared_object(plain, bundle.PruneStats()) == plain
    assert bundle.prune_shared_object(b"not an elf", bundle.PruneStats()) == b"not an elf"


def _wheel(path: Path) -> None:
    members = {
        "vllm/__init__.py": b"__version__ = '0.26.0'\n",
        "vllm/_C.abi3.so": elf({".text": b"\xc3" * 8, ".nv_fatbin": fatbin(SM80, SM90, PTX80)}),
        "vllm/vllm-rs": b"\x7fELF rust front end",
        "vllm/third_party/fmha_sm100/api.py": b"raise ImportError\n",
        "vllm/configs/E=1,N=14336,device_name=NVIDIA_H200.json": b"{}\n",
        "vllm-0.26.0.dist-info/METADATA": b"Name: vllm\nVersion: 0.26.0\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("vllm-0.26.0.dist-info/RECORD", "stale,sha256=x,1\n")


def test_the_pruned_wheel_drops_what_the_path_never_loads_and_records_every_file_it_keeps(tmp_path: Path) -> None:
    _wheel(src := tmp_path / "vllm.whl")
    manifest = bundle.prune_wheel(src, dst := tmp_path / "out.whl")
    assert set(manifest["dropped"]) == {"vllm/vllm-rs", "vllm/third_party/fmha_sm100/api.py"}
    assert "VLLM_USE_RUST_FRONTEND" in manifest["dropped"]["vllm/vllm-rs"]
    assert manifest["pruned"]["vllm/_C.abi3.so"]["kept"] == {"sm_90": len(SM90)}
    with zipfile.ZipFile(dst) as z:
        names = z.namelist()
        rows = list(csv.reader(io.StringIO(z.read("vllm-0.26.0.dist-info/RECORD").decode())))
        assert sorted(row[0] for row in rows) == sorted(names)  # a comma in a path is quoted, not split
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, size) == (f"sha256={expected}", str(len(data)))
        assert all(info.date_time == bundle.FIXED_TIME for info in z.infolist())
    bundle.prune_wheel(src, again := tmp_path / "again.whl")
    assert again.read_bytes() == dst.read_bytes()


def _requirements() -> list[Requirement]:
    lines = (PROOF / "requirements-gpu.txt").read_text().splitlines()
    return [Requirement(line.split("#")[0].strip()) for line in lines if line.split("#")[0].strip()]


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def test_every_package_the_offline_path_needs_is_on_the_image_or_pinned_in_the_bundle_never_both() -> None:
    pinned = {_norm(n) for n, _ in bundle.WHEELS}
    on_image = {_norm(n) for n in bundle.ON_IMAGE}
    for req in _requirements():
        name = _norm(req.name)
        assert (name in pinned) != (name in on_image), (
            f"{req.name}: pinned {name in pinned}, on image {name in on_image}"
        )


def test_the_pinned_versions_meet_the_bounds_vllm_declares_and_each_package_is_pinned_once() -> None:
    pins = {_norm(n): v for n, v in bundle.WHEELS}
    assert len(pins) == len(bundle.WHEELS)
    for req in _requirements():
        if _norm(req.name) in pins:
            assert req.specifier.contains(pins[_norm(req.name)], prereleases=True), (req, pins[_norm(req.name)])
    assert pins["apache-tvm-ffi"] == "0.1.10"  # vLLM 0.26.0's own pin, which xgrammar must accept
