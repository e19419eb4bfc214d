"""Assembles a one-binary OCI image archive that `ctr images import` accepts, with no registry.

The real node has no registry to pull from, so its sandbox (pause) image and test images are
static Go binaries packed here: one uncompressed layer holding the binary at /<name>, an image
config whose entrypoint runs it, and an OCI image layout tar naming the image. Every timestamp is
zero, so the same binary always gives the same digests (a rebuilt node reuses imported images).

Usage: python3 cluster/oci_image.py BINARY IMAGE_NAME ARCHIVE
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def _tar(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A deterministic tar of name -> (content, mode)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (content, mode) in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def _blob(blobs: dict[str, tuple[bytes, int]], content: bytes, media_type: str) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    blobs["blobs/sha256/" + digest.removeprefix("sha256:")] = (content, 0o644)
    return {"mediaType": media_type, "digest": digest, "size": len(content)}


def image_archive(binary: bytes, entrypoint: str, image_name: str) -> bytes:
    """The OCI layout tar of an image whose only file is `binary` at `/<entrypoint>`."""
    blobs: dict[str, tuple[bytes, int]] = {}
    layer = _tar({entrypoint: (binary, 0o755)})
    layer_desc = _blob(blobs, layer, LAYER_TYPE)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/" + entrypoint], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    config_desc = _blob(blobs, json.dumps(config, sort_keys=True).encode(), CONFIG_TYPE)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": config_desc, "layers": [layer_desc]}
    manifest_desc = _blob(blobs, json.dumps(manifest, sort_keys=True).encode(), MANIFEST_TYPE)
    manifest_desc["annotations"] = {
        "io.containerd.image.name": image_name,
        "org.opencontainers.image.ref.name": image_name.rpartition(":")[2],
    }
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    blobs["index.json"] = (json.dumps(index, sort_keys=True).encode(), 0o644)
    blobs["oci-layout"] = (b'{"imageLayoutVersion": "1.0.0"}', 0o644)
    return _tar(blobs)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: oci_image.py BINARY IMAGE_NAME ARCHIVE", file=sys.stderr)
        return 2
    binary, image_name, archive = Path(argv[0]), argv[1], Path(argv[2])
    if ":" not in image_name.rpartition("/")[2]:
        print(f"image name {image_name!r} has no tag; give one, e.g. {image_name}:1", file=sys.stderr)
        return 2
    archive.write_bytes(image_archive(binary.read_bytes(), binary.name, image_name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
