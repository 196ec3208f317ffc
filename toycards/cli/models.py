"""The commands that turn cards and GGUF files into running code: `gen`, `run` and `eval`.

Owns: argument parsing and output of `toycards gen` (a generated module to stdout or, written
atomically, to a file), `toycards run` (streamed text generation) and `toycards eval` (per-token
log-probabilities and perplexity, text or JSON); each is one library call (codegen, loader,
evaluate) plus printing. `toycards.cli` adds them to its group.
What a file or a card says reaches the terminal terminal-safe (render/escape.py): a generated
module shown on a terminal, notes; `eval` shows token texts as Python literals; `run`'s
generated text is the model's output and is printed as it comes.
Leaves out: the work itself, the card-file and GGUF-inspection commands (cards.py, files.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from toycards.cli.options import card_option, device_option, given_card, run_target_option
from toycards.errors import ToycardsError
from toycards.fileio import write_atomic
from toycards.render.escape import terminal_safe, to_terminal


def _checked(card) -> None:
    """Raise the checker's errors for `card`, against its own file and lines."""
    from toycards.checker import check

    errors = [d for d in check(card) if d.severity == "error"]
    if errors:
        raise ToycardsError.from_diagnostics(errors, {card.main.span.file: card.source})


def _card_or_file(source: str, given: str | None):
    """The card to generate from: a card file, or the card of a GGUF file (`given`, else the
    file's own), checked, and checked to fit the file."""
    if not source.endswith(".gguf"):
        if given is not None:
            raise click.UsageError("--card goes with a GGUF file: gen MODEL.gguf --card FILE")
        from toycards.lang.parse import parse

        card = parse(Path(source))
        _checked(card)
        return card
    from toycards.gguf.reader import open_gguf
    from toycards.models.load import card_for_file, check_fits

    with open_gguf(source) as f:
        card = card_for_file(f, given)
        _checked(card)
        check_fits(card, f)
    return card


def _refuse_overwriting(output: str, *inputs: str | None) -> None:
    for path in inputs:
        if path is not None and Path(output).exists() and Path(output).resolve() == Path(path).resolve():
            raise ToycardsError(f"{output}: is an input; refusing to overwrite it with generated code")


@click.command("gen")
@click.argument("source")
@click.option("--target", type=click.Choice(["torch", "numpy"]), default="torch", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the module here (atomically) instead of stdout.",
)
@card_option
def gen_cmd(source: str, target: str, output: str | None, card: str | None) -> None:
    """Generate a runnable module from CARD or from the card of MODEL.gguf (or `--card FILE`,
    checked to fit MODEL.gguf)."""
    from toycards.codegen import generate_source

    given = given_card(card)
    if output is not None:
        _refuse_overwriting(output, source, given)
    card = _card_or_file(source, given)
    text = generate_source(card, target)
    if output is None:
        click.echo(terminal_safe(text) if to_terminal(sys.stdout) else text, nl=False)
        return
    write_atomic(output, text)
    click.echo(f"wrote {output} ({target}, {len(text.splitlines())} lines)", err=True)


def _load(model: str, target: str, card: str | None, device: str | None = None):
    """The model of a GGUF file, with its own card or with `--card FILE` bound to its weights
    (`--device`: the torch target's, checked before the file is read)."""
    from toycards.library import read_card_file
    from toycards.models.load import load, torch_device

    if not model.endswith(".gguf"):
        raise ToycardsError(f"{model}: expected a .gguf file")
    if device is not None:
        if target != "torch":
            raise ToycardsError(
                f"--device {device}: only the torch target runs on a device (add --target torch)"
            )
        device = torch_device(device, "--device")
    given = given_card(card)
    if given is not None:
        return load(read_card_file(given), weights=model, target=target, device=device)
    return load(model, target=target, device=device)


@click.command("run")
@click.argument("model")
@click.option("-p", "--prompt", required=True, help="Text to continue.")
@click.option(
    "-n", "--max-tokens", "max_tokens", type=click.IntRange(0, 100_000), default=64, show_default=True
)
@click.option(
    "--temperature", type=click.FloatRange(0.0), default=0.0, show_default=True, help="0 is greedy."
)
@click.option("--top-k", "top_k", type=click.IntRange(1), default=None)
@click.option("--top-p", "top_p", type=click.FloatRange(0.0, 1.0, min_open=True), default=None)
@click.option("--seed", type=int, default=None)
@click.option(
    "--kv-cache",
    "kv_type",
    type=click.Choice(["f32", "f16"]),
    default="f32",
    show_default=True,
    help="What the KV cache keeps keys and values as: f16 (llama.cpp's default) halves its memory and"
    " the bytes each token reads; f32 decodes exactly as a full pass computes.",
)
@run_target_option
@device_option
@card_option
def run_cmd(
    model: str,
    prompt: str,
    max_tokens: int,
    temperature: float,
    top_k,
    top_p,
    seed,
    kv_type: str,
    target: str,
    device,
    card,
) -> None:
    """Generate text from MODEL.gguf, streaming it as it comes.

    Exit status 1 when the file cannot be run, or when its logits become NaN or infinite
    (`toycards describe MODEL.gguf --check-tensors` finds the tensors that hold them).
    """
    import numpy as np

    if kv_type != "f32" and target == "reference":
        raise ToycardsError(
            f"--kv-cache {kv_type}: the reference target keeps no KV cache (add --target numpy or torch)"
        )
    m = _load(model, target, card, device)
    if m.RECOMPUTE:  # said once, as a note line rather than a Python warning
        m._recompute_said = True
        note = f"note: decoding recomputes the whole sequence at each step: {m.RECOMPUTE}"
        click.echo(terminal_safe(note, newlines=False), err=True)
    sys.stdout.write(prompt)
    sys.stdout.flush()
    try:  # NumPy's warnings stay quiet: non-finite logits stop generation with one line instead
        with np.errstate(all="ignore"):
            for piece in m.generate(
                prompt,
                max_tokens=max_tokens,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
                kv_type=kv_type,
            ):
                sys.stdout.write(piece)
                sys.stdout.flush()
    finally:  # end the text's line, also before an error (non-finite logits) on stderr
        sys.stdout.write("\n")
        sys.stdout.flush()


@click.command("eval")
@click.argument("model")
@click.option("--text", "text_file", type=click.Path(dir_okay=False), help="Score the text of this file.")
@click.option("-p", "--prompt", help="Score this text.")
@click.option(
    "--top-k", "top_k", type=click.IntRange(0), default=0, help="Also show the model's k likeliest tokens."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@run_target_option
@device_option
@card_option
def eval_cmd(
    model: str,
    text_file: str | None,
    prompt: str | None,
    top_k: int,
    as_json: bool,
    target: str,
    device,
    card,
) -> None:
    """Per-token log-probabilities and perplexity of a text under MODEL.gguf."""
    from toycards.models.evaluate import evaluate

    if (text_file is None) == (prompt is None):
        raise click.UsageError("give exactly one of --text FILE or --prompt TEXT")
    if text_file is not None:
        try:
            prompt = Path(text_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ToycardsError(
                f"{text_file}: cannot read the text ({getattr(e, 'strerror', None) or e})"
            ) from None
    import numpy as np

    with np.errstate(all="ignore"):  # non-finite logits are one error line, not NumPy's warnings
        result = evaluate(_load(model, target, card, device), text=prompt, top_k=top_k)
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False, indent=1))
        return
    for s in result.tokens:
        alts = "  ".join(f"{piece!r} {lp:.3f}" for _, piece, lp in s.top)
        click.echo(f"{s.position:>5}  {s.piece!r:<16} {s.logprob:9.4f}" + (f"   top: {alts}" if alts else ""))
    click.echo(
        f"tokens {result.n_tokens}  mean log-prob {result.mean_logprob:.4f}  perplexity {result.perplexity:.3f}"
    )
