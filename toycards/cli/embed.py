"""The `toycards embed` command: embeddings of texts from a model whose card outputs them (BERT).

Owns: argument parsing and output of `toycards embed MODEL --text …`, as llama.cpp's embedding
example gives them: each text is tokenized with the model's specials ([CLS] … [SEP]), its tokens'
embeddings pooled by the file's pooling_type (`--pooling` overrides it) and normalised (`--normalize`,
llama.cpp's `--embd-normalize`: 2, unit Euclidean length, by default). The output is one row per
text (per token of each text, in order, with pooling none):
- on stdout, a row per line, numbers separated by spaces;
- `-o FILE.npy`: the rows as one float32 array [rows, d_e] (numpy.save);
- `-o FILE.json`: llama.cpp's `--embd-output-format json` object,
  `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}, ...]}`.
Leaves out: the work (`ModelAPI.embed`, runtime/embedding.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from toycards.cli.options import card_option, device_option, run_target_option, threads_option
from toycards.cli.running import interruptible_command, load_model
from toycards.errors import ToycardsError
from toycards.fileio import atomic_output, write_atomic
from toycards.runtime.embedding import NORMALIZE_HELP, POOLINGS

FORMATS = (".npy", ".json")


@click.command("embed")
@click.argument("model")
@click.option(
    "-t",
    "--text",
    "texts",
    multiple=True,
    required=True,
    help="A text to embed; repeat for several (`-`: each line of stdin is one).",
)
@click.option(
    "--pooling",
    type=click.Choice(POOLINGS),
    default=None,
    help="How a text's token embeddings become one (default: the file's pooling_type).",
)
@click.option(
    "--normalize",
    "norm",
    type=click.IntRange(-1),
    default=2,
    show_default=True,
    metavar="P",
    help=f"Normalisation of each embedding: {NORMALIZE_HELP}.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the embeddings here (atomically): FILE.npy (a float32 array) or FILE.json (llama.cpp's).",
)
@run_target_option
@device_option
@card_option
@threads_option
@interruptible_command
def embed_cmd(
    model: str, texts: tuple[str, ...], pooling, norm: int, output, target: str, device, card
) -> None:
    """Embeddings of texts under MODEL.gguf, a model whose card outputs them (BERT): one row per
    text, or per token of each text with --pooling none."""
    import numpy as np

    if output is not None and Path(output).suffix not in FORMATS:
        raise click.UsageError(f"-o {output}: name a .npy or .json file")
    texts = _texts(texts)
    m = load_model(model, target, card, device, embeddings=True)
    got = m.embed(list(texts), pooling=pooling, normalize=norm)
    rows = np.concatenate(got) if isinstance(got, list) else got  # (rows, d_e)
    if output is None:
        for row in rows:
            click.echo(" ".join(f"{v:.6f}" for v in row))
    elif output.endswith(".npy"):
        with atomic_output(output) as part, open(part, "wb") as fh:  # a name of its own: no ".npy" added
            np.save(fh, rows.astype(np.float32))
    else:
        write_atomic(output, json.dumps(_llama_cpp_json(rows)) + "\n")
    if output is not None:
        click.echo(f"wrote {output} ({rows.shape[0]} × {rows.shape[1]})", err=True)


def _texts(given: tuple[str, ...]) -> list[str]:
    """The texts: each `--text`, where `-` stands for every non-empty line of stdin (UTF-8)."""
    out: list[str] = []
    for text in given:
        if text != "-":
            out.append(text)
            continue
        data = sys.stdin.buffer.read()
        try:
            lines = data.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise ToycardsError(f"--text -: stdin is not UTF-8 text (byte {e.start})") from None
        out += [line for line in lines if line.strip()]
    if not out:
        raise ToycardsError("--text -: stdin holds no text")
    return out


def _llama_cpp_json(rows) -> dict:
    """llama.cpp's embedding example output with `--embd-output-format json`."""
    data = [
        {"object": "embedding", "index": i, "embedding": [float(v) for v in row]}
        for i, row in enumerate(rows)
    ]
    return {"object": "list", "data": data}
