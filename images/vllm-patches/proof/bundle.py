"""The offline bundle for dsa_pp_real.py on an H200 machine that can download nothing: `python bundle.py`.

It downloads vLLM 0.26.0's wheel and the wheels its offline path imports that such a machine lacks (cp312,
manylinux x86_64, each pinned), prunes the vLLM wheel to what an sm_90 GPU can load and this proof's path needs, and
writes into an ignored folder (default `proof/.bundle/`):

    wheels/*.whl     the pruned vLLM wheel (same name and version; its RECORD rewritten) and the pinned wheels
    MANIFEST.json    what went in: each wheel's sha256, and for vLLM every file dropped or pruned, with why
    install.sh       `pip install --no-index --no-deps --target DIR` of those wheels

Pruning changes no code. It only removes bytes an H200 never loads, or files whose code this path never runs:

- CUDA fat binaries (the `.nv_fatbin` section of every `.so`): each module keeps its sm_90 cubins, the images the
  driver loads on an H200 ahead of any PTX; cubins for sm_75, 80, 86, 89, 100, 120 and all PTX are removed and the
  module's size field shortened. A module without an sm_90 cubin is left empty: on an H200 its kernels would have
  run JIT-compiled PTX, and now fail to launch, loudly. So every kernel that runs is the same cubin as with the
  full wheel, and a run that completes used nothing that was removed.
- Whole files, each listed in DROPPED with why this path does not run it.

Checked on an H200 (results/pp1-one-gpu/): the PP=1 runs complete with the bundle and log the pinned FLASHMLA_SPARSE
backend; vLLM also logs a FLASH_ATTN MLA prefill backend, which the sparse backend does not call here, since
FlashAttention 2 with the bundle fails to launch ("no kernel image is available") when it is called directly.

The rule and the fat-binary walk are pure functions over bytes (tests/unit/test_proof_bundle.py); only `main` and
`download` touch the network. Re-running gives the same bytes: members keep their order, with a fixed timestamp.
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import json
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VLLM = ("vllm", "0.26.0", "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl")
VLLM_SHA256 = "adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de"
TARGET_SM = 90  # NVIDIA H200 / H100

# The packages vLLM 0.26.0's offline path imports at module level (requirements-gpu.txt) that the device image
# lacks (device README, "Python packages already there"), with what they need, resolved by pip for cp312 manylinux
# x86_64 and pinned. llguidance and xgrammar are imported when the engine core builds its structured-output manager:
# their backends annotate dataclass fields with the packages' types (backend_guidance.py:144, backend_xgrammar.py:145).
# A few of these are also on the image (anyio, idna, h11, typing-extensions, annotated-doc):
# pydantic 2.14, openai 3 and fastapi need versions at least this recent, and the image's are not stated.
WHEELS: tuple[tuple[str, str], ...] = (
    ("annotated-doc", "0.0.7"),
    ("annotated-types", "0.8.0"),
    ("apache-tvm-ffi", "0.1.10"),  # vLLM 0.26.0 pins it; xgrammar 0.2.6 is the newest that accepts it
    ("anyio", "4.16.0"),
    ("cachetools", "8.0.2"),
    ("cbor2", "6.3.0"),
    ("fastapi", "0.136.3"),
    ("h11", "0.16.0"),
    ("httpcore2", "2.16.2"),
    ("httpx2", "2.16.2"),
    ("idna", "3.20"),
    ("jiter", "0.19.0"),
    ("llguidance", "1.7.6"),
    ("msgspec", "0.23.0"),
    ("openai", "3.57.0"),
    ("openai-harmony", "0.0.8"),
    ("partial-json-parser", "0.2.1.1.post7"),
    ("pybase64", "1.5.1"),
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("pyzmq", "27.3.0"),
    ("setproctitle", "1.3.8"),
    ("sniffio", "1.3.1"),
    ("starlette", "1.10.0"),
    ("truststore", "0.10.5"),
    ("typing-extensions", "4.16.0"),
    ("typing-inspection", "0.4.5"),
    ("xgrammar", "0.2.6"),
)

# The packages requirements-gpu.txt names that the GPU image already has (device README, "Python packages already
# there"): the bundle brings every other one.
ON_IMAGE = (
    "aiohttp",
    "cloudpickle",
    "einops",
    "huggingface-hub",
    "numpy",
    "packaging",
    "pillow",
    "prometheus-client",
    "psutil",
    "py-cpuinfo",
    "pyyaml",
    "regex",
    "requests",
    "safetensors",
    "tokenizers",
    "tqdm",
    "transformers",
    "uvloop",
)

# Whole files of the vLLM wheel whose code this proof's path never runs (paths inside the wheel, fnmatch patterns).
DROPPED: tuple[tuple[str, str], ...] = (
    (
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
        "FlashAttention 3 (114 MiB of sm_90 cubins): the proof runs the FLASHMLA_SPARSE backend, which calls FlashMLA "
        "(vllm/v1/attention/backends/mla/flashmla_sparse.py imports no vllm_flash_attn); without this file "
        "flash_attn_interface.py:22-29 reports FA3 unavailable and the FA2 module keeps `vllm.vllm_flash_attn` "
        "importable (__init__.py:33)",
    ),
    ("vllm/vllm-rs", "the Rust front end, run only with VLLM_USE_RUST_FRONTEND (vllm/envs.py:560-577)"),
    ("vllm/third_party/fmha_sm100/*", "Blackwell-only kernels, imported only inside MiniMax-M3 functions"),
    ("vllm/third_party/deep_gemm/_C.cpython-310-*", "DeepGEMM built for Python 3.10 (the machine has 3.12)"),
    ("vllm/third_party/deep_gemm/_C.cpython-311-*", "DeepGEMM built for Python 3.11 (the machine has 3.12)"),
    ("vllm/third_party/deep_gemm/_C.cpython-313-*", "DeepGEMM built for Python 3.13 (the machine has 3.12)"),
    ("vllm/third_party/deep_gemm/_C.cpython-314-*", "DeepGEMM built for Python 3.14 (the machine has 3.12)"),
)

# ------------------------------------------------------------------------------------------------ fat binaries

FATBIN_MAGIC = 0xBA55ED50
FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the images that follow
ENTRY_HEAD = struct.Struct("<HHIQ")  # kind, version, header size, payload size (arch is a u32 at offset 28)
KIND_PTX, KIND_CUBIN = 1, 2


@dataclass(frozen=True)
class Image:
    """One image of a fat binary: a cubin for one SM, or PTX for one compute capability."""

    kind: int
    arch: int
    start: int  # offset in the blob
    length: int  # header and payload


@dataclass
class PruneStats:
    modules: int = 0
    kept: dict[str, int] = field(default_factory=dict)  # "sm_90" / "compute_80" -> bytes
    removed: dict[str, int] = field(default_factory=dict)
    emptied_modules: int = 0  # modules with no cubin for the target: no image left

    def add(self, into: dict[str, int], image: Image) -> None:
        key = f"{'sm' if image.kind == KIND_CUBIN else 'compute' if image.kind == KIND_PTX else 'kind'}_{image.arch}"
        into[key] = into.get(key, 0) + image.length


def images_of(blob: bytes | bytearray, start: int) -> tuple[int, int, list[Image]]:
    """The header size, the images' total size and the images of the fat binary at `start`."""
    magic, _version, header, size = FATBIN_HEADER.unpack_from(blob, start)
    if magic != FATBIN_MAGIC:
        raise ValueError(f"no fat binary at {start}")
    images, pos, end = [], start + header, start + header + size
    while pos < end:
        kind, _v, ehead, payload = ENTRY_HEAD.unpack_from(blob, pos)
        (arch,) = struct.unpack_from("<I", blob, pos + 28)
        if ehead < 32 or pos + ehead + payload > end:
            raise ValueError(f"malformed fat binary image at {pos}")
        images.append(Image(kind, arch, pos - start, ehead + payload))
        pos += ehead + payload
    return header, size, images


def keep_for(images: Sequence[Image], sm: int = TARGET_SM) -> list[Image]:
    """The cubins built for `sm`: what the driver loads on such a GPU, ahead of any PTX it could compile. A module
    without one keeps nothing: its kernels then fail to launch there, loudly, instead of running JIT-compiled PTX."""
    return [i for i in images if i.kind == KIND_CUBIN and i.arch == sm]


def prune_fatbin_section(section: bytearray, stats: PruneStats, sm: int = TARGET_SM) -> None:
    """Rewrite in place every fat binary of a `.nv_fatbin` section: kept images moved to the front, in their order,
    the size field shortened, the freed tail zeroed. Each fat binary keeps its start, where its wrapper points."""
    pos = 0
    while pos + FATBIN_HEADER.size <= len(section):
        if struct.unpack_from("<I", section, pos)[0] != FATBIN_MAGIC:
            pos += 8  # fat binaries are 8-byte aligned; padding between them
            continue
        header, size, images = images_of(section, pos)
        kept = keep_for(images, sm)
        stats.modules += 1
        stats.emptied_modules += not kept
        body = b"".join(bytes(section[pos + i.start : pos + i.start + i.length]) for i in kept)
        for image in images:
            stats.add(stats.kept if image in kept else stats.removed, image)
        old_end = pos + header + size
        FATBIN_HEADER.pack_into(section, pos, FATBIN_MAGIC, *struct.unpack_from("<HH", section, pos + 4), len(body))
        section[pos + header : old_end] = body + bytes(size - len(body))
        pos = old_end


def elf_section(data: bytes | bytearray, name: str) -> tuple[int, int] | None:
    """(offset, size) in the file of a named section of a 64-bit little-endian ELF, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    for sh_name, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", strtab + sh_name)
        if data[strtab + sh_name : end].decode() == name:
            return offset, size
    return None


def prune_shared_object(data: bytes, stats: PruneStats, sm: int = TARGET_SM) -> bytes:
    found = elf_section(data, ".nv_fatbin")
    if found is None:
        return data
    offset, size = found
    out = bytearray(data)
    section = bytearray(out[offset : offset + size])
    prune_fatbin_section(section, stats, sm)
    out[offset : offset + size] = section
    return bytes(out)


# ------------------------------------------------------------------------------------------------ the wheel

FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def dropped_reason(name: str, dropped: Iterable[tuple[str, str]] = DROPPED) -> str | None:
    return next((why for pattern, why in dropped if fnmatch.fnmatchcase(name, pattern)), None)


def record_row(name: str, data: bytes) -> tuple[str, str, str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return name, f"sha256={digest}", str(len(data))


def record_text(rows: Iterable[Sequence[str]]) -> str:
    """RECORD as wheels write it: CSV, so a path with a comma is quoted."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def prune_wheel(src: Path, dst: Path, sm: int = TARGET_SM) -> dict[str, Any]:
    """Write the pruned wheel; return what was dropped and pruned (for MANIFEST.json)."""
    dropped: dict[str, str] = {}
    pruned: dict[str, Any] = {}
    records: list[Sequence[str]] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        for info in zin.infolist():
            name = info.filename
            if name == record_name:
                continue
            why = dropped_reason(name)
            if why:
                dropped[name] = why
                continue
            data = zin.read(info)
            if name.endswith(".so"):
                stats = PruneStats()
                new = prune_shared_object(data, stats, sm)
                if stats.modules:
                    pruned[name] = {"bytes_before": len(data), **stats.__dict__}
                data = new
            records.append(record_row(name, data))
            zout.writestr(_member(name, info.external_attr), data)
        records.append((record_name, "", ""))
        zout.writestr(_member(record_name, 0o644 << 16), record_text(records))
    return {"dropped": dropped, "fatbin_pruned_to": f"sm_{sm}", "pruned": pruned}


def _member(name: str, external_attr: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.external_attr = external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


# ------------------------------------------------------------------------------------------------ download and main

PIP_PLATFORM = [
    "--only-binary=:all:",
    "--no-deps",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[
        arg
        for tag in (*(f"manylinux_2_{n}" for n in (39, 35, 34, 31, 28, 27, 26, 24, 17)), "manylinux2014")
        for arg in ("--platform", f"{tag}_x86_64")
    ],
]


def download(requirements: Sequence[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", *PIP_PLATFORM, "-d", str(dest), *requirements]
    subprocess.run(cmd, check=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_file(folder: Path, name: str, version: str) -> Path:
    stem = name.replace("-", "_").lower()
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if len(found) != 1:
        raise FileNotFoundError(f"{name}=={version}: {len(found)} wheels in {folder}")
    return found[0]


INSTALL = """#!/bin/sh
# Installs the bundle on a machine with Python 3.12 and torch 2.11.0 (CUDA 13.0), without network:
#   sh install.sh /tmp/site && export PYTHONPATH=/tmp/site
set -e
here=$(dirname "$0")
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "${1:-/tmp/site}" \\
    "$here"/wheels/*.whl
"""


def build(out: Path, cache: Path) -> dict[str, Any]:
    name, version, filename = VLLM
    download([f"{name}=={version}", *(f"{n}=={v}" for n, v in WHEELS)], cache)
    source = cache / filename
    digest = sha256(source)
    if digest != VLLM_SHA256:
        raise SystemExit(f"{filename}: sha256 {digest}, expected {VLLM_SHA256}")
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("*.whl"):
        old.unlink()
    manifest: dict[str, Any] = {"vllm": {"source": filename, "source_sha256": digest}, "wheels": {}}
    manifest["vllm"].update(prune_wheel(source, wheels / filename))
    manifest["vllm"]["sha256"] = sha256(wheels / filename)
    for n, v in WHEELS:
        path = wheel_file(cache, n, v)
        (wheels / path.name).write_bytes(path.read_bytes())
        manifest["wheels"][path.name] = sha256(path)
    (out / "install.sh").write_text(INSTALL)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    manifest["size_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / ".bundle")
    parser.add_argument("--cache", type=Path, default=HERE / ".bundle-cache", help="downloaded wheels, reused")
    args = parser.parse_args(argv)
    manifest = build(args.out, args.cache)
    vllm = manifest["vllm"]
    print(f"{args.out}: {manifest['size_bytes'] / 2**20:.1f} MiB; vLLM wheel sha256 {vllm['sha256']}")
    for so, stats in sorted(vllm["pruned"].items()):
        kept, removed = sum(stats["kept"].values()), sum(stats["removed"].values())
        print(f"  {so}: kept {kept / 2**20:.1f} MiB of fat binaries, removed {removed / 2**20:.1f} MiB")
    for pattern, _why in DROPPED:
        count = sum(fnmatch.fnmatchcase(path, pattern) for path in vllm["dropped"])
        print(f"  dropped {pattern}: {count} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
