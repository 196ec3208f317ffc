"""Models by name and by content: every command that takes a model takes a name that `toycards list`
shows (Ollama `MODEL:TAG`, Hugging Face `ORG/REPO/FILE`), and any file that starts with the GGUF
magic, whatever its name.

The stores are faked in tmp_path in each store's own layout (as tests/cli/test_list_cli.py does) and
hold copies of examples/tiny-llama.gguf; the oracle for a name is the same command on the file's
path, which must print the same thing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli, one_error

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
DIGEST = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
MODEL_LAYER = "application/vnd.ollama.image.model"


def ollama_store(root: Path, names: list[str]) -> Path:
    """An Ollama store with tiny-llama's bytes as blob `sha256-HEX`, named by a manifest
    `manifests/registry.ollama.ai/NAMESPACE/MODEL/TAG` for each of `names`."""
    (root / "blobs").mkdir(parents=True)
    shutil.copyfile(EXAMPLE, root / "blobs" / f"sha256-{DIGEST}")
    layer = {"mediaType": MODEL_LAYER, "digest": f"sha256:{DIGEST}", "size": EXAMPLE.stat().st_size}
    for name in names:
        manifest = root / "manifests" / "registry.ollama.ai" / name
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    return root


def hf_cache(root: Path) -> Path:
    """A Hugging Face hub cache: models--org--Tiny-GGUF, its blob linked from snapshot rev1 (main),
    and an older revision whose file of the same name is a broken download."""
    repo = root / "models--org--Tiny-GGUF"
    (repo / "snapshots" / "old").mkdir(parents=True)
    (repo / "snapshots" / "old" / "tiny-llama.gguf").write_bytes(b"GGUF\x03\x00\x00\x00cut short")
    (repo / "blobs").mkdir(parents=True)
    blob = repo / "blobs" / DIGEST
    shutil.copyfile(EXAMPLE, blob)
    snapshot = repo / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    os.symlink(os.path.relpath(blob, snapshot), snapshot / "tiny-llama.gguf")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev1")
    return root


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """The model caches discovery reads, all in tmp_path: Ollama (`tiny:1m`, `tiny:latest`,
    `someone/tiny:v2`), the HF cache (`org/Tiny-GGUF/tiny-llama.gguf`), an empty LM Studio."""
    ollama = ollama_store(tmp_path / "ollama", ["library/tiny/1m", "library/tiny/latest", "someone/tiny/v2"])
    env = {
        "OLLAMA_MODELS": str(ollama),
        "HF_HUB_CACHE": str(hf_cache(tmp_path / "hf")),
        "LMSTUDIO_MODELS": str(tmp_path / "lmstudio"),
    }
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return {"blob": ollama / "blobs" / f"sha256-{DIGEST}", "work": work, "env": env}


def test_run_by_ollama_name_is_run_of_its_file(stores):
    by_path = cli("run", EXAMPLE, "-p", "Hello", "-n", "4")
    by_name = cli("run", "tiny:1m", "-p", "Hello", "-n", "4")
    assert by_path.exit_code == 0 and by_name.exit_code == 0, by_name.output
    assert by_name.stdout == by_path.stdout and by_name.stdout.startswith("Hello")


def test_eval_by_hugging_face_name_is_eval_of_its_file(stores):
    def scored(model) -> dict:
        out = cli("eval", model, "-p", "Hello there, world", "--json")
        assert out.exit_code == 0, out.output
        return {k: v for k, v in json.loads(out.stdout).items() if k not in ("seconds", "tokens_per_second")}

    assert scored("org/Tiny-GGUF/tiny-llama.gguf") == scored(EXAMPLE)


def test_a_hugging_face_name_means_the_revision_main_names(stores):
    listing = cli("list", "--no-caches", "--hf-cache", stores["env"]["HF_HUB_CACHE"], "--json")
    listed = json.loads(listing.stdout)
    assert [e["name"] for e in listed] == ["org/Tiny-GGUF/tiny-llama.gguf"] * 2  # two revisions, one name
    out = cli("describe", "org/Tiny-GGUF/tiny-llama.gguf", "--format", "json")
    assert out.exit_code == 0 and json.loads(out.stdout)["header"]["architecture"] == "llama"


@pytest.mark.parametrize(
    "name",
    [
        "tiny:1m",
        "tiny",
        "library/tiny:1m",
        "registry.ollama.ai/library/tiny:1m",
        "TINY:1M",
        "someone/tiny:v2",
    ],
)
def test_ollama_names_as_ollama_takes_them(stores, name):
    out = cli("describe", name, "--format", "json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["header"]["architecture"] == "llama"


def test_a_blob_without_the_gguf_suffix_is_a_model_in_every_command(stores):
    blob = stores["blob"]
    assert cli("run", blob, "-p", "Hi", "-n", "2").stdout == cli("run", EXAMPLE, "-p", "Hi", "-n", "2").stdout
    described = cli("describe", blob, "--format", "card").stdout  # its header line names the file
    assert described.replace(blob.name, EXAMPLE.name) == cli("describe", EXAMPLE, "--format", "card").stdout
    assert cli("gen", blob, "--target", "numpy").stdout == cli("gen", EXAMPLE, "--target", "numpy").stdout
    same = cli("diff", blob, EXAMPLE)
    assert same.exit_code == 0 and "describe the same card" in same.stdout


def test_diff_and_gen_take_model_names(stores):
    same = cli("diff", "tiny:1m", "org/Tiny-GGUF/tiny-llama.gguf")
    assert same.exit_code == 0 and same.stdout.startswith(
        "tiny:1m and org/Tiny-GGUF/tiny-llama.gguf describe the same"
    )
    assert (
        cli("gen", "tiny:1m", "--target", "numpy").stdout == cli("gen", EXAMPLE, "--target", "numpy").stdout
    )


def test_a_path_wins_over_a_name(stores):
    (stores["work"] / "tiny:1m").write_text(
        "not a model\n"
    )  # a file in the working folder, named like the model
    assert "tiny:1m: not a GGUF file" in one_error(cli("describe", "tiny:1m"))


def test_an_unknown_name_says_where_the_names_are_and_the_close_ones(stores):
    line = one_error(cli("run", "tiny:2m", "-p", "x"))
    assert line.startswith("error: tiny:2m: no such file") and "`toycards list`" in line
    assert "did you mean tiny:1m" in line
    far = one_error(cli("eval", "qwen-unheard-of", "-p", "x"))
    assert "`toycards list`" in far and "did you mean" not in far


@pytest.mark.parametrize("command", [["run", "-p", "x"], ["eval", "-p", "x y"], ["describe"], ["gen"]])
def test_a_file_named_gguf_that_is_not_gguf_is_one_line(stores, command):
    bad = stores["work"] / "download.gguf"
    bad.write_text("<html>404 Not Found</html>")
    line = one_error(cli(command[0], bad, *command[1:]))
    assert f"{bad}: not a GGUF file (magic b'<htm')" in line


def test_a_folder_is_not_a_model(stores):
    assert "is a directory" in one_error(cli("run", stores["work"], "-p", "x"))


def test_a_name_too_long_for_a_file_is_one_line(stores):
    name = "m" * 300  # the system refuses it as a path (ENAMETOOLONG)
    assert one_error(cli("describe", name)).startswith(f"error: {name}: no such file, and no model")
    assert "an empty argument" in one_error(cli("run", "", "-p", "x"))


def test_run_by_name_in_a_fresh_process(stores, tmp_path):
    """The console script as a user meets it: exit 0 with the text, and 1 with one line."""
    env = {**os.environ, **stores["env"], "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [sys.executable, "-m", "toycards", "run", "tiny:1m", "-p", "Hello", "-n", "3"],
        capture_output=True, text=True, env=env, cwd=stores["work"],
    )  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.startswith("Hello"), ok.stderr
    (tmp_path / "bad.gguf").write_bytes(b"")
    bad = subprocess.run(
        [sys.executable, "-m", "toycards", "run", str(tmp_path / "bad.gguf"), "-p", "x"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "not a GGUF file (empty)" in bad.stderr
