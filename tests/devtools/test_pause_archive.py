"""The real node's pause image is a `docker save` archive that containerd's importer can read: the manifest
names the reference, the config by its digest and a layer whose digest is the config's diff ID, and the layer
holds the binary, executable, at the entrypoint."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from grpo_dev.localcluster.build import PAUSE_REFERENCE, docker_archive


def test_archive_is_a_loadable_one_layer_image_of_the_binary(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really, but bytes all the same")
    with tarfile.open(fileobj=io.BytesIO(docker_archive(binary, PAUSE_REFERENCE, "pause"))) as archive:
        [manifest] = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        config_bytes = archive.extractfile(manifest["Config"]).read()  # type: ignore[union-attr]
        [layer_name] = manifest["Layers"]
        layer_bytes = archive.extractfile(layer_name).read()  # type: ignore[union-attr]
    assert manifest["RepoTags"] == [PAUSE_REFERENCE]
    assert manifest["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
    assert (config["os"], config["config"]["Entrypoint"]) == ("linux", ["/pause"])
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
        member = layer.getmember("pause")
        assert member.mode & 0o111 and layer.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]
