"""Input bounds: what a card (a file, or one embedded in a GGUF file) and a GGUF vocabulary may
make toycards build, and that reading, checking, formatting and compiling a card grows with it.

Oracles: the limits as documented (lang/reading.py, tokenizer/tokenizer.py, checker/calls.py and
checker/names.py), hand-counted depths and lengths, tracemalloc's peak (memory spent before a
refusal), and call counts: cProfile's count of function calls, which is the same on every run,
for the work per step of `fmt` and `gen` at two sizes.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import struct
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from gguf_factory import RawGGUF, RawKV, V, pack_strings

import toycards.checker.calls as calls_module
import toycards.checker.names as names_module
import toycards.library as library
from toycards.checker import check
from toycards.checker.calls import MAX_CALL_DEPTH
from toycards.checker.names import HINT_BUDGET
from toycards.cli import main
from toycards.codegen import generate_source
from toycards.errors import ToycardsError
from toycards.gguf.facts import CARD_KEY
from toycards.gguf.reader import open_gguf
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.lang.reading import MAX_BLOCKS, MAX_BYTES, MAX_DEPTH, MAX_LINE, MAX_LINES, MAX_NAME
from toycards.render.html import render_html
from toycards.render.latex import render_latex
from toycards.render.markdown import render_markdown
from toycards.tokenizer.tokenizer import MAX_TOKENS, load_tokenizer, tokenizer_of

# ── cards built here ────────────────────────────────────────────────────────────────────
HEAD = """toycards 1

Algorithm: P ← Chain(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d_e ∈ ℕ  from "{arch}.embedding_length"
  N_V ∈ ℕ
  L ∈ ℕ  from "{arch}.block_count"
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  W_u ∈ ℝ^{N_V×d_e}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
3  X_3 ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
"""


def chain_card(n: int, value: str = "X_{k} ← X_{j} + X_{j}") -> str:
    """A model card of n steps, steps 4 … n-2 a straight line `X_k ← X_{k-1} + X_{k-1}`."""
    lines = [HEAD.rstrip("\n")]
    lines += [f"{k}  " + value.format(k=k, j=k - 1) for k in range(4, n - 1)]
    lines += [f"{n - 1}  Z ← W_u · X_{n - 2}", f"{n}  return P = softmax(Z)"]
    return "\n".join(lines) + "\n"


def nested_card(blocks: int, terms: int) -> str:
    """`blocks` loops one inside the other around one step adding `terms` terms."""
    lines = [HEAD.rstrip("\n")]
    lines += [f"{4 + i}  {'  ' * i}for l_{i} = 1, 2, …, L do" for i in range(blocks)]
    lines.append(f"{4 + blocks}  {'  ' * blocks}X_3 ← " + " + ".join(["X_3"] * terms))
    lines += [f"{5 + blocks + i}  {'  ' * (blocks - 1 - i)}end" for i in range(blocks)]
    k = 5 + 2 * blocks
    lines += [f"{k}  Z ← W_u · X_3", f"{k + 1}  return P = softmax(Z)"]
    return "\n".join(lines) + "\n"


def calls_card(n: int, calls_each: int = 1) -> str:
    """Algorithms f_0 … f_{n-1}, each calling the one before `calls_each` times; the model calls
    f_{n-1} once per column."""
    algos = [
        "toycards 1\n\nAlgorithm: y ← f_0(x)\nInput: x ∈ ℝ^{d}\nOutput: y ∈ ℝ^{d}\n1  return y = x + x\n"
    ]
    for k in range(1, n):
        value = " + ".join([f"f_{k - 1}(x)"] * calls_each)
        algos.append(
            f"Algorithm: y ← f_{k}(x)\nInput: x ∈ ℝ^{{d}}\nOutput: y ∈ ℝ^{{d}}\n1  return y = {value}\n"
        )
    main_card = chain_card(8, "X_{k} ← X_{j} + X_{j}").replace("toycards 1\n\n", "")
    main_card = main_card.replace("4  X_4 ← X_3 + X_3", f"4  for t ∈ [ℓ]: g_t ← f_{n - 1}(e_t)")
    main_card = main_card.replace("5  X_5 ← X_4 + X_4", "5  X_5 ← [g_1, …, g_ℓ]  ∷ ℝ^{d_e×ℓ}")
    return "\n".join(algos) + "\n" + main_card


def diagnostics(text: str) -> list:
    with pytest.raises(ToycardsError) as info:
        parse(text)
    return info.value.diagnostics


# ── an embedded card is untrusted input ─────────────────────────────────────────────────
def gguf_with_card(path: Path, card: str | bytes) -> Path:
    kv = [RawKV("general.architecture", V.STRING, "llama"), RawKV(CARD_KEY, V.STRING, card)]
    return RawGGUF(kv=kv).write(path)


def never_parsed(*args, **kw):
    raise AssertionError("the embedded card was parsed")


def with_peak(fn, *args):
    """`fn(*args)` and the most memory Python allocated while it ran (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        result = fn(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def refused_with_peak(fn, *args):
    """The ToycardsError `fn(*args)` raises (pytest's ExceptionInfo) and the peak while it ran."""

    def refused():
        with pytest.raises(ToycardsError) as info:
            fn(*args)
        return info

    return with_peak(refused)


@pytest.mark.parametrize("unit", ["x", "←"])  # one byte, three bytes a character
def test_an_embedded_card_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch, unit):
    card = unit * (MAX_BYTES // len(unit.encode()) + 1)
    size = len(card.encode())
    path = gguf_with_card(tmp_path / "big.gguf", card)
    monkeypatch.setattr(library, "parse_cached", never_parsed)
    with open_gguf(path) as f:
        info, peak = refused_with_peak(library.card_for_file, f)
    message = str(info.value)
    assert message == (
        f"{path}:{CARD_KEY}: the embedded card is {size} bytes, too large for a card (limit {MAX_BYTES})"
    )
    assert peak < size // 16, f"peak {peak:,} bytes before refusing a card of {size:,}"


def test_gen_refuses_an_oversized_embedded_card_in_one_line(tmp_path):
    path = gguf_with_card(tmp_path / "big.gguf", "x" * (MAX_BYTES + 1))
    result = CliRunner().invoke(main, ["gen", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "too large for a card" in lines[0] and str(path) in lines[0]


def test_an_embedded_card_is_held_to_the_line_limit(tmp_path):
    path = gguf_with_card(tmp_path / "tall.gguf", "▷ a comment\n" * (MAX_LINES + 1))
    with open_gguf(path) as f, pytest.raises(ToycardsError) as info:
        library.card_for_file(f)
    assert str(info.value) == (
        f"{path}:{CARD_KEY}: {MAX_LINES + 1} lines is too many for a card (limit {MAX_LINES})"
    )


def test_a_card_file_over_the_line_limit_is_refused(tmp_path):
    path = tmp_path / "tall.card"
    path.write_text("▷ a comment\n" * (MAX_LINES + 1), encoding="utf-8")
    with pytest.raises(ToycardsError, match=f"lines is too many for a card \\(limit {MAX_LINES}\\)"):
        parse(path)


# ── names, lines, depth ─────────────────────────────────────────────────────────────────
def test_a_one_megabyte_name_is_one_located_diagnostic_in_proportional_memory():
    text = chain_card(8).replace("X_5 ←", "X" + "x" * 1_000_000 + " ←")
    line = text[: text.index("Xxxx")].count("\n") + 1
    length = len(text.splitlines()[line - 1])
    diags, peak = with_peak(diagnostics, text)
    assert len(diags) == 1
    (d,) = diags
    assert d.span.line == line and d.span.col == MAX_LINE + 1
    assert d.message == f"a line of {length} characters (the limit is {MAX_LINE})"
    assert f"{MAX_NAME} characters" in d.hint
    assert peak < 5_000_000, f"peak {peak:,} bytes for a 1 MB name"


def test_a_name_over_the_limit_is_located_where_it_stands():
    name = "X" + "x" * MAX_NAME
    text = chain_card(8).replace("X_5 ← X_4 + X_4", f"{name} ← X_4 + X_4")
    (d,) = diagnostics(text)
    assert d.message == f"a name of {MAX_NAME + 1} characters (the limit is {MAX_NAME})"
    assert (d.span.col, d.span.end_col) == (4, 4 + MAX_NAME + 1)
    assert d.hint


def test_a_name_at_the_limit_reads():
    name = "X" + "x" * (MAX_NAME - 1)
    text = (
        chain_card(7).replace("X_5 ← X_4 + X_4", f"{name} ← X_4 + X_4").replace("W_u · X_5", f"W_u · {name}")
    )
    card = parse(text)
    assert check(card) == []


def test_the_nesting_limits_hold_at_one_past_them():
    deep = diagnostics(nested_card(0, MAX_DEPTH))  # the step, MAX_DEPTH - 1 additions, a name
    assert [d.message for d in deep] == [f"an expression nested more than {MAX_DEPTH} levels deep"]
    assert deep[0].span.line == HEAD.count("\n") + 1 and deep[0].span.col == 10
    blocks = diagnostics(nested_card(MAX_BLOCKS + 1, 2))
    assert [d.message for d in blocks] == [f"blocks nested {MAX_BLOCKS + 1} deep (the limit is {MAX_BLOCKS})"]
    assert blocks[0].span.line == HEAD.count("\n") + 1 + MAX_BLOCKS


def test_a_card_at_every_nesting_limit_goes_through_every_stage():
    card = parse(nested_card(MAX_BLOCKS, MAX_DEPTH - 1))
    assert check(card) == []
    assert parse(render_card(card)) == card
    for render in (render_markdown, render_latex, render_html):
        assert "Chain" in render(card)
    for target in ("numpy", "torch"):
        compile(generate_source(card, target), f"<{target}>", "exec")


def test_a_chain_of_calls_over_the_limit_is_one_error():
    text = calls_card(MAX_CALL_DEPTH)  # f_0 … f_63 and the model, which calls f_63
    errors = [d for d in check(parse(text)) if d.severity == "error"]
    assert [d.message for d in errors] == [
        f"Chain begins a chain of {MAX_CALL_DEPTH + 1} algorithms, each calling the next "
        f"(the limit is {MAX_CALL_DEPTH})"
    ]
    assert errors[0].span.line == text[: text.index("Algorithm: P ← Chain")].count("\n") + 1
    at_limit = parse(calls_card(MAX_CALL_DEPTH - 1))
    assert check(at_limit) == []
    compile(generate_source(at_limit, "numpy"), "<numpy>", "exec")


def test_calls_that_fan_out_are_followed_once_each(monkeypatch):
    """f_k calls f_{k-1} twice: followed call by call, 40 algorithms are 2^40 calls."""
    n, seen = 40, []
    real = calls_module._branching_hypers

    def counted(algo, resolve, visited, memo):
        seen.append(algo.name)
        assert len(seen) < 100 * n, "the calls are followed more than once each"
        return real(algo, resolve, visited, memo)

    monkeypatch.setattr(calls_module, "_branching_hypers", counted)
    assert check(parse(calls_card(n, calls_each=2))) == []
    followed = [name for name in seen if name.startswith("f_")]
    assert len(set(followed)) == n and len(followed) <= 5 * n


def test_did_you_mean_hints_stop_at_the_budget(monkeypatch):
    """An unknown name on each of 3,000 steps: each hint would compare it with every name in scope."""
    compared = [0]
    real = names_module._near

    def counted(a: str, b: str) -> bool:
        compared[0] += 1
        return real(a, b)

    monkeypatch.setattr(names_module, "_near", counted)
    card = parse(chain_card(3000, "X_{k} ← Y_{j} + X_{j}"))
    unknown = [d for d in check(card) if d.message.startswith("unknown name Y_")]
    assert len(unknown) == 3000 - 5  # steps 4 … n - 2
    assert unknown[0].hint == "did you mean X_3?" and unknown[-1].hint == ""
    assert compared[0] <= 2 * HINT_BUDGET  # the Unicode and the ASCII spellings


# ── GGUF vocabularies ───────────────────────────────────────────────────────────────────
def test_a_vocabulary_claiming_more_tokens_than_the_file_holds_is_refused_at_open(tmp_path):
    claim = 2**27
    payload = struct.pack("<IQ", V.STRING, claim) + pack_strings(["a", "b", "c"])
    kv = [
        RawKV("general.architecture", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.model", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.tokens", V.ARRAY, payload=payload),
    ]
    path = RawGGUF(kv=kv).write(tmp_path / "claims.gguf")
    info, peak = refused_with_peak(load_tokenizer, path)
    message = str(info.value)
    assert message.startswith(f"{path}: truncated: value of 'tokenizer.ggml.tokens': array length {claim} ")
    assert "\n" not in message
    assert peak < 1_000_000, f"peak {peak:,} bytes"


def test_a_vocabulary_over_the_limit_is_refused_before_it_is_read(tmp_path):
    """MAX_TOKENS + 1 empty tokens (8 zero bytes each: a sparse file) that the file really holds."""
    n = MAX_TOKENS + 1
    kv = [
        RawKV("general.architecture", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.model", V.STRING, "gpt2"),
        RawKV("tokenizer.ggml.tokens", V.ARRAY, payload=struct.pack("<IQ", V.STRING, n)),
    ]
    head = RawGGUF(kv=kv, alignment=1).header()
    path = tmp_path / "vocab.gguf"
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + 8 * n)  # n zero-length strings
    with open_gguf(path) as f:
        assert f.array_len("tokenizer.ggml.tokens") == n
        info, peak = refused_with_peak(tokenizer_of, f)
    assert str(info.value) == (
        f"{path}: tokenizer.ggml.tokens holds {n} entries, more than toycards reads ({MAX_TOKENS}, "
        "far above any real vocabulary)"
    )
    assert peak < 1_000_000, f"peak {peak:,} bytes"


# ── work in proportion to the card ──────────────────────────────────────────────────────
def fmt_and_gen(text: str) -> str:
    """What `toycards fmt` and `toycards gen` do with a card: parse it, print it, parse the
    print, check it, generate its module."""
    card = parse(text)
    assert parse(render_card(card)) == card
    assert check(card) == []
    return generate_source(card, "numpy")


def function_calls(text: str) -> int:
    """Python function calls (cProfile's count, the same on every run) that `fmt_and_gen` makes."""
    profile = cProfile.Profile()
    source = profile.runcall(fmt_and_gen, text)
    assert source.count(" ← X_") >= text.count(" ← X_")  # each step, commented with its card line
    return pstats.Stats(profile).total_calls


def test_fmt_and_gen_do_the_same_work_per_step_at_5k_and_10k_steps():
    function_calls(chain_card(100))  # caches warm: the prelude, the parser's tables
    small, large = function_calls(chain_card(5_000)), function_calls(chain_card(10_000))
    assert large < 2.05 * small, f"{small:,} calls for 5k steps, {large:,} for 10k"


def test_a_20k_step_card_goes_through_fmt_and_gen_with_the_collector_paused():
    """The cyclic collector's full passes each visit every object alive: run while a card of n
    steps grows, they make its reading cost O(n log n) with a large constant."""
    text = chain_card(20_000)
    gc.collect()  # a full collection now rather than one owed by earlier work
    before = gc.get_stats()[2]["collections"]
    card = parse(text)
    printed = render_card(card)  # fmt
    again = parse(printed)
    diags = check(card)
    source = generate_source(card, "numpy")  # gen
    assert gc.get_stats()[2]["collections"] == before
    assert gc.isenabled()
    assert again == card and diags == []
    assert source.count("X_19997 = X_19996 + X_19996") == 1
