"""Tests for toycards.discover on fake HF, Ollama and LM Studio stores built in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import gguf
import numpy as np
import pytest

from toycards.errors import ToycardsError
from toycards.inspect.discover import Entry, Found, find_gguf_files, list_gguf, locations, summarise

ENV_VARS = [
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "OLLAMA_MODELS",
    "LMSTUDIO_MODELS",
]
NONE = dict(hf_cache=[], ollama=[], lmstudio=[])  # switch the cache sources off


def write_gguf(path: Path, arch: str = "llama", name: str = "Tiny", seed: int = 0, extra=None) -> Path:
    """A small GGUF: 2 F32 tensors, 1 F16, 1 Q8_0; 8·4 + 4 + 4·4 + 2·32 = 116 parameters."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", rng.normal(size=(8, 4)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(4, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", rng.normal(size=(4, 4)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.normal(size=(2, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No cache variables, HOME in tmp_path, working folder an empty tmp folder."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


# ---- fake stores -----------------------------------------------------------------------------------


def make_hf_cache(root: Path) -> Path:
    """models--org--Tiny-GGUF with two revisions sharing one blob, models--gpt2, and a dataset."""
    repo = root / "models--org--Tiny-GGUF"
    blob = write_gguf(repo / "blobs" / "aaaa", name="Tiny")
    blob2 = write_gguf(repo / "blobs" / "bbbb", name="Tiny Q", seed=1)
    for rev in ("rev1", "rev2"):
        (repo / "snapshots" / rev).mkdir(parents=True)
        os.symlink(os.path.relpath(blob, repo / "snapshots" / rev), repo / "snapshots" / rev / "tiny.gguf")
    (repo / "snapshots" / "rev2" / "q8").mkdir()
    os.symlink(os.path.relpath(blob2, repo / "snapshots/rev2/q8"), repo / "snapshots/rev2/q8/tiny-q8.gguf")
    (repo / "snapshots" / "rev2" / "README.md").write_text("hello")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev2")
    write_gguf(root / "models--gpt2" / "snapshots" / "r" / "gpt2.gguf", arch="gpt2")
    write_gguf(root / "datasets--org--data" / "snapshots" / "r" / "not-a-model.gguf")
    return root


def ollama_blob(root: Path, content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(content)
    return f"sha256:{digest}"


def ollama_manifest(root: Path, host: str, namespace: str, model: str, tag: str, layers: list) -> None:
    path = root / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "0" * 64,
        },
        "layers": [
            {"mediaType": f"application/vnd.ollama.image.{kind}", "digest": d, "size": 1}
            for kind, d in layers
        ],
    }
    path.write_text(json.dumps(manifest))


def make_ollama(root: Path) -> Path:
    """Two tags of one model, a user model, an hf.co model, and manifests that must be skipped."""
    model = ollama_blob(root, write_gguf(root / "tmp.gguf", arch="qwen2", name="Qwen").read_bytes())
    other = ollama_blob(root, write_gguf(root / "tmp.gguf", arch="gemma", name="Gemma", seed=2).read_bytes())
    (root / "tmp.gguf").unlink()
    license_ = ollama_blob(root, b"Apache License 2.0\n")
    template = ollama_blob(root, b"{{ .Prompt }}")
    ggml_era = ollama_blob(root, b"ggjt" + b"\0" * 60)  # an old pre-GGUF model layer
    lib, reg = "library", "registry.ollama.ai"
    ollama_manifest(
        root, reg, lib, "tiny", "latest", [("model", model), ("license", license_), ("template", template)]
    )
    ollama_manifest(root, reg, lib, "tiny", "0.5b", [("license", license_), ("model", model)])
    ollama_manifest(root, reg, "someone", "mine", "v1", [("model", other)])
    ollama_manifest(root, "hf.co", "bartowski", "Tiny-GGUF", "Q8_0", [("model", other)])
    ollama_manifest(root, reg, lib, "oldie", "latest", [("model", ggml_era)])
    ollama_manifest(root, reg, lib, "gone", "latest", [("model", "sha256:" + "1" * 64)])  # blob deleted
    ollama_manifest(root, reg, lib, "evil", "latest", [("model", "sha256:../../../etc/passwd")])
    ollama_manifest(root, reg, lib, "textonly", "latest", [("license", license_)])
    (root / "manifests" / reg / lib / "broken").mkdir()
    (root / "manifests" / reg / lib / "broken" / "latest").write_text("{not json")
    return root


def make_lmstudio(root: Path) -> Path:
    write_gguf(root / "lmstudio-community" / "Tiny-GGUF" / "Tiny-Q8_0.gguf", arch="phi3", name="Phi")
    (root / "lmstudio-community" / "Tiny-GGUF" / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    write_gguf(root / ".partial" / "x" / "hidden.gguf")
    return root


# ---- finding ---------------------------------------------------------------------------------------


def test_hf_cache_names_repo_and_file_and_dedupes_revisions_by_blob(tmp_path):
    hub = make_hf_cache(tmp_path / "hub")
    found = find_gguf_files(dirs=[], hf_cache=hub, ollama=[], lmstudio=[])
    assert [(f.source, f.name) for f in found] == [
        ("hf", "gpt2/gpt2.gguf"),
        ("hf", "org/Tiny-GGUF/q8/tiny-q8.gguf"),
        ("hf", "org/Tiny-GGUF/tiny.gguf"),
    ]
    tiny = found[2]
    assert Path(tiny.path) == hub / "models--org--Tiny-GGUF" / "snapshots" / "rev2" / "tiny.gguf"  # refs/main
    assert tiny.size == (hub / "models--org--Tiny-GGUF" / "blobs" / "aaaa").stat().st_size
    assert tiny.aliases == ()  # rev1's link has the same name, so it is no alias


def test_ollama_store_reads_manifests_and_skips_what_is_not_a_gguf_model(tmp_path):
    root = make_ollama(tmp_path / "ollama")
    found = find_gguf_files(dirs=[], hf_cache=[], ollama=root, lmstudio=[])
    assert [(f.name, f.aliases) for f in found] == [
        ("hf.co/bartowski/Tiny-GGUF:Q8_0", ("someone/mine:v1",)),
        ("tiny:0.5b", ("tiny:latest",)),
    ]
    assert all(
        Path(f.path).parent == root / "blobs" and Path(f.path).name.startswith("sha256-") for f in found
    )
    assert all(f.source == "ollama" for f in found)


def test_ollama_blobs_named_with_a_colon_by_old_versions(tmp_path):
    root = tmp_path / "ollama"
    digest = ollama_blob(root, write_gguf(tmp_path / "m.gguf").read_bytes())
    old = root / "blobs" / digest  # "sha256:HEX"
    (root / "blobs" / digest.replace(":", "-")).rename(old)
    ollama_manifest(root, "registry.ollama.ai", "library", "m", "latest", [("model", digest)])
    found = find_gguf_files(dirs=[], hf_cache=[], ollama=root, lmstudio=[])
    assert [(f.name, Path(f.path)) for f in found] == [("m:latest", old)]


def test_lmstudio_layout_skips_hidden_folders(tmp_path):
    root = make_lmstudio(tmp_path / "lms")
    found = find_gguf_files(dirs=[], hf_cache=[], ollama=[], lmstudio=root)
    assert [f.name for f in found] == [
        "lmstudio-community/Tiny-GGUF/broken.gguf",
        "lmstudio-community/Tiny-GGUF/Tiny-Q8_0.gguf",
    ]


def test_folder_is_flat_unless_recursive_and_survives_symlink_loops(tmp_path):
    top = tmp_path / "models"
    write_gguf(top / "a.gguf")
    write_gguf(top / "sub" / "deeper" / "B.GGUF", seed=3)
    write_gguf(top / ".hidden" / "c.gguf", seed=4)
    (top / "notes.txt").write_text("x")
    os.symlink(top, top / "sub" / "loop")  # walking into it must not run forever
    os.symlink(top / "missing.gguf", top / "dangling.gguf")
    assert [f.name for f in find_gguf_files(dirs=top, **NONE)] == ["a.gguf"]
    deep = find_gguf_files(dirs=top, recursive=True, **NONE)
    assert [(f.source, f.name) for f in deep] == [("folder", "a.gguf"), ("folder", "sub/deeper/B.GGUF")]


def test_dirs_may_name_files_and_must_exist(tmp_path):
    f = write_gguf(tmp_path / "one.gguf")
    assert [x.name for x in find_gguf_files(dirs=[f], **NONE)] == ["one.gguf"]
    with pytest.raises(ToycardsError, match="does not exist"):
        find_gguf_files(dirs=tmp_path / "nope", **NONE)
    with pytest.raises(ToycardsError, match="ollama location .* is not a folder"):
        find_gguf_files(dirs=[], hf_cache=[], ollama=f, lmstudio=[])


def test_a_file_seen_from_two_sources_is_listed_once_under_the_store(tmp_path):
    root = make_lmstudio(tmp_path / "lms")
    repo = root / "lmstudio-community" / "Tiny-GGUF"
    found = find_gguf_files(dirs=repo, hf_cache=[], ollama=[], lmstudio=root)
    assert [(f.source, f.name, f.aliases) for f in found] == [
        ("lmstudio", "lmstudio-community/Tiny-GGUF/broken.gguf", ("broken.gguf",)),
        ("lmstudio", "lmstudio-community/Tiny-GGUF/Tiny-Q8_0.gguf", ("Tiny-Q8_0.gguf",)),
    ]


def test_sources_are_sorted_hf_ollama_lmstudio_folder(tmp_path, clean_env):
    write_gguf(Path.cwd() / "local.gguf")
    found = find_gguf_files(
        hf_cache=make_hf_cache(tmp_path / "hub"),
        ollama=make_ollama(tmp_path / "ollama"),
        lmstudio=make_lmstudio(tmp_path / "lms"),
    )
    assert [f.source for f in found] == ["hf"] * 3 + ["ollama"] * 2 + ["lmstudio"] * 2 + ["folder"]
    assert found == find_gguf_files(
        hf_cache=tmp_path / "hub", ollama=tmp_path / "ollama", lmstudio=tmp_path / "lms"
    )


# ---- locations and environment variables --------------------------------------------------------------


def test_environment_variables_choose_the_stores(tmp_path, clean_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(make_hf_cache(tmp_path / "hub")))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "ignored"))  # HF_HUB_CACHE wins
    monkeypatch.setenv("OLLAMA_MODELS", str(make_ollama(tmp_path / "ollama")))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(make_lmstudio(tmp_path / "lms")))
    write_gguf(Path.cwd() / "here.gguf")
    names = [(f.source, f.name) for f in find_gguf_files()]
    assert ("hf", "org/Tiny-GGUF/tiny.gguf") in names
    assert ("ollama", "tiny:0.5b") in names
    assert ("lmstudio", "lmstudio-community/Tiny-GGUF/Tiny-Q8_0.gguf") in names
    assert ("folder", "here.gguf") in names
    assert len(names) == 8


def test_hf_home_and_xdg_cache_home_are_used_in_turn(tmp_path, clean_env, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert locations()["hf"] == [tmp_path / "xdg" / "huggingface" / "hub"]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert locations()["hf"] == [tmp_path / "hfhome" / "hub"]
    make_hf_cache(tmp_path / "hfhome" / "hub")
    assert len(find_gguf_files(ollama=[], lmstudio=[])) == 3


def test_default_locations_are_under_home(clean_env):
    where = locations()
    assert where["hf"] == [clean_env / ".cache" / "huggingface" / "hub"]
    assert where["ollama"][0] == clean_env / ".ollama" / "models"
    assert where["lmstudio"] == [
        clean_env / ".lmstudio" / "models",
        clean_env / ".cache" / "lm-studio" / "models",
    ]
    assert where["folder"] == [Path.cwd()]
    make_lmstudio(clean_env / ".cache" / "lm-studio" / "models")  # the pre-0.3 location
    make_hf_cache(clean_env / ".cache" / "huggingface" / "hub")
    found = find_gguf_files(ollama=[])
    assert [f.source for f in found] == ["hf"] * 3 + ["lmstudio"] * 2


def test_explicit_arguments_replace_the_environment(tmp_path, clean_env, monkeypatch):
    monkeypatch.setenv("LMSTUDIO_MODELS", str(make_lmstudio(tmp_path / "lms")))
    assert find_gguf_files(dirs=[], hf_cache=[], ollama=[], lmstudio=[]) == []
    other = tmp_path / "other"
    write_gguf(other / "p" / "r" / "x.gguf")
    assert [f.name for f in find_gguf_files(dirs=[], hf_cache=[], ollama=[], lmstudio=str(other))] == [
        "p/r/x.gguf"
    ]


# ---- summaries -------------------------------------------------------------------------------------


def test_summary_reads_the_header(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", arch="qwen2", name="Qwen Tiny")
    (found,) = find_gguf_files(dirs=tmp_path, **NONE)
    entry = summarise(found)
    assert entry.error is None, entry.error
    assert (entry.path, entry.source, entry.name, entry.size) == (
        str(path),
        "folder",
        "m.gguf",
        path.stat().st_size,
    )
    assert (entry.architecture, entry.model_name, entry.file_type) == ("qwen2", "Qwen Tiny", "Q8_0")
    assert entry.n_tensors == 4
    assert entry.n_params == 8 * 4 + 4 + 4 * 4 + 2 * 32
    assert entry.tensor_types == {"F32": 2, "F16": 1, "Q8_0": 1}
    assert entry.split is None
    assert json.loads(json.dumps(asdict(entry)))["tensor_types"] == {"F32": 2, "F16": 1, "Q8_0": 1}


def test_summary_of_a_shard_says_which(tmp_path):
    path = write_gguf(tmp_path / "m-00002-of-00003.gguf", extra={"split.no": 1, "split.count": 3})
    assert summarise(Found(str(path), "folder", path.name, path.stat().st_size)).split == "2/3"


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"GGUF\x03\x00\x00\x00garbage", ""),  # right magic, truncated header
        (b"<html>404 Not Found</html>", "not a GGUF file"),  # a failed download
        (b"", "not a GGUF file"),
    ],
)
def test_a_bad_file_is_listed_with_its_error(tmp_path, content, needle):
    write_gguf(tmp_path / "good.gguf")
    (tmp_path / "bad.gguf").write_bytes(content)
    entries = list_gguf(dirs=tmp_path, **NONE)
    assert [(e.name, e.error is None) for e in entries] == [("bad.gguf", False), ("good.gguf", True)]
    bad = entries[0]
    assert needle in bad.error and "bad.gguf" in bad.error
    assert bad.architecture is None and bad.n_params is None and bad.tensor_types == {}
    json.dumps(asdict(bad))


def test_an_unreadable_file_is_listed_with_its_error(tmp_path):
    path = write_gguf(tmp_path / "locked.gguf")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read any file")
        (entry,) = list_gguf(dirs=tmp_path, **NONE)
        assert "cannot read" in entry.error
    finally:
        path.chmod(0o644)


def test_whole_listing_of_all_stores(tmp_path, clean_env):
    entries = list_gguf(
        hf_cache=make_hf_cache(tmp_path / "hub"),
        ollama=make_ollama(tmp_path / "ollama"),
        lmstudio=make_lmstudio(tmp_path / "lms"),
    )
    assert all(isinstance(e, Entry) for e in entries)
    by_name = {e.name: e for e in entries}
    assert by_name["tiny:0.5b"].architecture == "qwen2"
    assert by_name["hf.co/bartowski/Tiny-GGUF:Q8_0"].model_name == "Gemma"
    assert by_name["gpt2/gpt2.gguf"].architecture == "gpt2"
    assert by_name["lmstudio-community/Tiny-GGUF/broken.gguf"].error
    assert [e.name for e in entries if e.error] == ["lmstudio-community/Tiny-GGUF/broken.gguf"]
