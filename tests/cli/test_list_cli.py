"""`toycards list` on fake model stores: a folder, a Hugging Face hub cache, Ollama's blob store
with its manifests, and LM Studio's model folder, each built in tmp_path.

The expected names follow each store's own layout (HF `models--ORG--NAME/snapshots/REV/FILE`,
Ollama `manifests/HOST/NAMESPACE/MODEL/TAG` → blob, LM Studio `PUBLISHER/REPO/FILE`); the
architecture and tensor types are what the files were written with.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

Q = gguf.GGMLQuantizationType


def cli(*args: str):
    """`toycards ARGS…`, in process."""
    from toycards.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def tiny(path: Path, arch: str, name: str) -> Path:
    """A GGUF with one F32 and one F16 tensor (8·4 + 4 = 36 parameters)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_tensor("token_embd.weight", np.ones((8, 4), np.float32))
    w.add_tensor("output_norm.weight", np.ones(4, np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def stores(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "OLLAMA_MODELS",
                "LMSTUDIO_MODELS"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "folder"
    tiny(folder / "a.gguf", "llama", "A")
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    tiny(folder / "sub" / "deep.gguf", "gpt2", "Deep")
    hf = tmp_path / "hf"
    repo = hf / "models--org--Tiny-GGUF"
    blob = tiny(repo / "blobs" / "abc", "qwen2", "Qwen")
    (repo / "snapshots" / "rev1").mkdir(parents=True)
    os.symlink(os.path.relpath(blob, repo / "snapshots" / "rev1"), repo / "snapshots" / "rev1" / "q.gguf")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev1")
    ollama = tmp_path / "ollama"
    data = tiny(tmp_path / "blob.gguf", "gemma", "Gemma").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (ollama / "blobs").mkdir(parents=True)
    (ollama / "blobs" / f"sha256-{digest}").write_bytes(data)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "gem" / "2b"
    manifest.parent.mkdir(parents=True)
    layer = {
        "mediaType": "application/vnd.ollama.image.model",
        "digest": f"sha256:{digest}",
        "size": len(data),
    }
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    lmstudio = tmp_path / "lmstudio"
    tiny(lmstudio / "pub" / "Phi-GGUF" / "phi.gguf", "phi3", "Phi")
    return {"--dir": folder, "--hf-cache": hf, "--ollama": ollama, "--lmstudio": lmstudio}


def args(stores, *extra: str) -> list[str]:
    return [x for flag, path in stores.items() for x in (flag, str(path))] + list(extra)


def test_list_json(stores):
    out = cli("list", *args(stores, "--json"))
    assert out.exit_code == 0, out.output
    entries = {(e["source"], e["name"]): e for e in json.loads(out.stdout)}
    assert set(entries) == {
        ("hf", "org/Tiny-GGUF/q.gguf"),
        ("ollama", "gem:2b"),
        ("lmstudio", "pub/Phi-GGUF/phi.gguf"),
        ("folder", "a.gguf"),
        ("folder", "broken.gguf"),
    }
    arch = {k[1]: e["architecture"] for k, e in entries.items()}
    assert arch == {"org/Tiny-GGUF/q.gguf": "qwen2", "gem:2b": "gemma", "pub/Phi-GGUF/phi.gguf": "phi3",
                    "a.gguf": "llama", "broken.gguf": None}  # fmt: skip
    a = entries[("folder", "a.gguf")]
    assert a["tensor_types"] == {"F16": 1, "F32": 1} and a["n_params"] == 36 and a["model_name"] == "A"
    assert entries[("folder", "broken.gguf")]["error"]


def test_list_recursive_and_table(stores):
    out = cli("list", *args(stores, "--recursive"))
    assert out.exit_code == 0
    for name in [
        "sub/deep.gguf",
        "gem:2b",
        "org/Tiny-GGUF/q.gguf",
        "pub/Phi-GGUF/phi.gguf",
        "qwen2",
        "F32 ×1",
    ]:
        assert name in out.stdout, name
    assert "broken.gguf" in out.stdout and "Traceback" not in out.output


def test_list_folder_only(stores, tmp_path, monkeypatch):
    monkeypatch.chdir(stores["--dir"])
    out = cli("list", "--no-caches", "--json")
    assert out.exit_code == 0
    assert {e["name"] for e in json.loads(out.stdout)} == {"a.gguf", "broken.gguf"}
    monkeypatch.setenv("OLLAMA_MODELS", str(stores["--ollama"]))  # the environment names a store
    out = cli("list", "--json")
    assert "gem:2b" in {e["name"] for e in json.loads(out.stdout)}


def test_list_missing_location(tmp_path):
    out = cli("list", "--dir", str(tmp_path / "nowhere"))
    assert out.exit_code == 1 and "does not exist" in out.stderr and "Traceback" not in out.output
