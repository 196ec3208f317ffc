"""The card library (`toycards/library/cards/*.card`): every card parses, is in canonical form, survives
the ASCII round trip and checks clean; the prelude and paper cards hold the algorithms that
model cards and codegen rely on; the model cards bind llama.cpp's tensor names and metadata keys
(`gguf.constants`) with the NumPy shapes that llama.cpp's converter writes (the oracle files of
`tests/oracle`, written from Hugging Face models the llama.cpp way).
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from importlib import resources

import gguf
import pytest

from toycards.checker import check_card
from toycards.lang import ir
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.library import CARDS_BY_TENSOR, library_card

CARD_DIR = resources.files("toycards.library.cards")
CARD_NAMES = sorted(p.name.removesuffix(".card") for p in CARD_DIR.iterdir() if p.name.endswith(".card"))
MODEL_CARDS = [n for n in CARD_NAMES if n not in ("prelude", "paper")]
# a card chosen by the tensors a file holds describes its table's architecture (llama_moe: llama)
ARCH_OF_CARD = {card: arch for arch, variants in CARDS_BY_TENSOR.items() for _, card in variants}


def card_text(name: str) -> str:
    return CARD_DIR.joinpath(f"{name}.card").read_text(encoding="utf-8")


def load(name: str) -> ir.Card:
    return parse(card_text(name), file=f"toycards/library/cards/{name}.card")


def first_difference(expected: str, actual: str) -> str:
    diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "card", "formatted", lineterm="")
    return "\n".join(list(diff)[:40])


def test_library_has_the_expected_cards():
    assert {"prelude", "paper", "gpt2", "llama"} <= set(CARD_NAMES)


# ── every card: parse, canonical form, ASCII round trip ─────────────────────────────────
@pytest.mark.parametrize("name", CARD_NAMES)
def test_card_formats_to_itself(name):
    text = card_text(name)
    formatted = render_card(parse(text))
    assert formatted == text, f"{name}.card is not in canonical form:\n{first_difference(text, formatted)}"


@pytest.mark.parametrize("name", CARD_NAMES)
def test_card_ascii_round_trip(name):
    card = load(name)
    ascii_text = render_card(card, ascii=True)
    again = parse(ascii_text)
    assert again == card, f"{name}.card: the ASCII rendering reads back differently:\n" + first_difference(
        render_card(card), render_card(again)
    )
    assert render_card(again, ascii=True) == ascii_text


@pytest.mark.parametrize("name", CARD_NAMES)
def test_card_checks_clean(name):
    diagnostics = check_card(load(name)).diagnostics
    problems = [d for d in diagnostics if d.severity != "note"]
    assert not problems, f"{name}.card:\n" + "\n".join(d.headline() for d in problems)


# ── the prelude and the paper card hold what callers rely on ─────────────────────────────
def header(a: ir.Algorithm) -> str:
    """`OUT ← Name(inputs | params)` as in /tmp/semantics.md's list."""
    params = f" | {', '.join(a.params)}" if a.params else ""
    return f"{a.output} ← {a.name}({', '.join(a.inputs)}{params})"


PRELUDE_HEADERS = {
    "token_embedding": ("1", "e ← token_embedding(v | W_e)"),
    "positional_embedding": ("2", "e_p ← positional_embedding(t | W_p)"),
    "basic_attention": ("3", "ṽ ← basic_attention(e, Z | W_q, b_q, W_k, b_k, W_v, b_v)"),
    "Attention": ("4", "Ṽ ← Attention(X, Z | W_q, b_q, W_k, b_k, W_v, b_v, Mask)"),
    "MHAttention": ("5", "Ṽ ← MHAttention(X, Z | W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, H, Mask)"),
    "layer_norm": ("6", "ê ← layer_norm(e | γ, β, ε)"),
    "unembedding": ("7", "p ← unembedding(e | W_u)"),
    "softmax": ("", "y ← softmax(x)"),
    "rms_norm": ("", "ê ← rms_norm(e | γ, ε)"),
    "GELU": ("", "y ← GELU(x)"),
    "GELU_tanh": ("", "y ← GELU_tanh(x)"),
    "SiLU": ("", "y ← SiLU(x)"),
    "ReLU": ("", "y ← ReLU(x)"),
    "SwiGLU": ("", "Y ← SwiGLU(X | W_gate, W_up, W_down)"),
    "attention": ("", "Ṽ ← attention(Q, K, V | Mask, c, σ)"),
    "rope_pairs": ("", "y ← rope_pairs(x, t | θ, ρ)"),
    "rope_halves": ("", "y ← rope_halves(x, t | θ, ρ)"),
    "MHAttention_fused": ("", "Ṽ ← MHAttention_fused(X | W_qkv, b_qkv, W_o, b_o, H, Mask)"),
    "rope": ("", "y ← rope(x, t | layout, θ, ρ)"),
    "GQAttention": ("", "Y ← GQAttention(Q, K, V | H, H_kv, layout, θ, ρ, Mask, c, σ)"),
}


@pytest.mark.parametrize("name", sorted(PRELUDE_HEADERS))
def test_prelude_algorithm_header(name):
    algo = load("prelude").algorithm(name)
    assert algo is not None, f"prelude.card has no algorithm {name}"
    number, expected = PRELUDE_HEADERS[name]
    assert (algo.number, header(algo)) == (number, expected)
    assert algo.description, f"{name}: no /* description */"
    assert algo.output_decls and algo.output_decls[0].names == (algo.output,), f"{name}: Output undeclared"
    declared = {n for d in algo.input_decls + algo.hyper_decls for n in d.names}
    declared |= {d.names[i] for d, _ in algo.all_params() for i in range(len(d.names))}
    missing = [n for n in algo.inputs + algo.params if n not in declared]
    assert not missing, f"{name}: header names without a declaration: {missing}"


PAPER = {
    "8": "P ← EDTransformer(z, x | θ)",
    "9": "P ← ETransformer(x | θ)",
    "10": "P ← DTransformer(x | θ)",
}


def test_paper_card_has_algorithms_8_to_10():
    card = load("paper")
    assert {a.number: header(a) for a in card.algorithms} == PAPER


def called_algorithms(stmts) -> set[str]:
    return {node.func for node in ir.walk(stmts) if isinstance(node, ir.Call)}


BUILTINS = {"length", "exp", "log", "tanh", "erf", "sin", "cos", "sqrt", "abs", "sigmoid", "max", "min"}
BUILTINS |= {"ceil", "rows", "topk", "softplus", "expm1"}
BUILTINS |= {"zeros", "filled"}  # lfm2: causal_conv with no bias (zeros(d_e))


@pytest.mark.parametrize("name", CARD_NAMES)
def test_every_call_has_a_callee(name):
    known = {a.name for a in load("prelude").algorithms} | {a.name for a in load(name).algorithms}
    for algo in load(name).algorithms:
        unknown = called_algorithms(algo.body) - known - BUILTINS
        assert not unknown, f"{name}.card, {algo.name}: calls {sorted(unknown)}, defined nowhere"


def test_family_cards_fold_into_the_prelude():
    """Issue 10's fold: a family card is its entry algorithm alone (attention variants are the
    prelude's one grouped-query attention with parameters), and the prelude holds one attention
    over projected heads besides the paper's Algorithms 1–7 and GPT-2's fused one."""
    for name in MODEL_CARDS:
        assert [a.name for a in load(name).algorithms] == [load(name).main.name], name
    attentions = [
        a.name for a in load("prelude").algorithms if "attention" in a.name.lower() and not a.number
    ]
    assert sorted(attentions) == ["GQAttention", "MHAttention_fused", "attention"], attentions


# ── model cards: entry point, llama.cpp names ────────────────────────────────────────────
# what an entry point outputs: a language model's next-token distribution, an encoder's embeddings (bert)
ENTRY_OUTPUTS = {"P": "Output: P ∈ (0,1)^{N_V×ℓ}", "E": "Output: E ∈ ℝ^{d_e×ℓ}"}


@pytest.mark.parametrize("name", MODEL_CARDS)
def test_model_card_entry_point(name):
    main = load(name).main
    assert (main.inputs, main.params) == (("x",), ("θ",)) and main.output in ENTRY_OUTPUTS
    assert render_card(ir.Card((main,))).count("Input: x ∈ V^ℓ") == 1
    assert ENTRY_OUTPUTS[main.output] in render_card(ir.Card((main,)))


def metadata_keys(algo: ir.Algorithm) -> list[str]:
    return [
        s.tensor
        for d in algo.hyper_decls
        if d.binding is not None and d.binding.kind == "from"
        for group in d.binding.sources
        for s in group
    ]


def tensor_templates(algo: ir.Algorithm) -> list[str]:
    """Every tensor a model card names, as `gguf.TENSOR_NAMES` spells it (`blk.{bid}.attn_q`)."""
    out = []
    for decl, group in algo.all_params():
        prefix = re.sub(r"\{[^}]*\}", "{bid}", group.prefix) if group else ""
        for alternatives in decl.binding.sources:
            out += [prefix + s.tensor for s in alternatives if s.tensor]
    return [re.sub(r"\.(weight|bias)$", "", t) for t in out]


# Tensors llama.cpp's loader takes for an architecture although gguf-py's MODEL_TENSORS leaves them
# out (so the converter never writes them): granite's optional rope_freqs (src/models/granite.cpp).
LOADER_ONLY_TENSORS = {"granite": {"rope_freqs"}, "granitemoe": {"rope_freqs"}}  # (granite's loader for both)
LOADER_ONLY_TENSORS["granitehybrid"] = {"rope_freqs"}  # its load_arch_tensors, optional in every layer
# nomic-bert's loader (create_tensor_qkv) takes attn_q, attn_k, attn_v where a file has no attn_qkv
LOADER_ONLY_TENSORS["nomic-bert"] = {"blk.{bid}.attn_q", "blk.{bid}.attn_k", "blk.{bid}.attn_v"}


@pytest.mark.parametrize("name", MODEL_CARDS)
def test_model_card_uses_gguf_constants(name):
    arch_name = ARCH_OF_CARD.get(name, name)  # general.architecture, which names no member: GRANITE_MOE
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name)
    algo = load(name).main
    known_keys = {v for cls in vars(gguf.Keys).values() if isinstance(cls, type) for v in vars(cls).values()}
    unknown_keys = [k for k in metadata_keys(algo) if k not in known_keys]
    assert not unknown_keys, f"{name}.card: metadata keys not in gguf.Keys: {unknown_keys}"
    known_tensors = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]}
    known_tensors |= LOADER_ONLY_TENSORS.get(name, set())
    unknown = [t for t in tensor_templates(algo) if t not in known_tensors]
    assert not unknown, f"{name}.card: tensors llama.cpp does not name for {name}: {unknown}"


@pytest.mark.parametrize("name", MODEL_CARDS)
def test_model_card_parameters_are_all_bound(name):
    unbound = [d.names for d, _ in load(name).main.all_params() if d.binding is None]
    assert not unbound, f"{name}.card: parameters without a tensor: {unbound}"


# ── model cards: shapes equal the tensors llama.cpp's converter writes ───────────────────
ORACLE_CASES = {
    "gpt2": ["gpt2"],
    "llama": ["llama", "llama-tied"],
    "qwen2": ["qwen2"],
    "qwen3": ["qwen3"],
    "starcoder2": ["starcoder2"],
    "granite": ["granite"],
    "smollm3": ["smollm3"],
    "gemma": ["gemma"],
    "olmo2": ["olmo2", "olmo3"],
    "gemma2": ["gemma2"],
    "gemma3": ["gemma3"],
    "olmoe": ["olmoe"],
    "qwen3moe": ["qwen3moe"],
    "qwen2moe": ["qwen2moe"],
    "llama_moe": ["mixtral"],
    "phi3": ["phi3", "phi3-longrope", "phi3-partial", "phi3-split"],
    "phi2": ["phi2", "phi2-fused"],
    "stablelm": ["stablelm", "stablelm-nobias"],
    "stablelm_parallel": ["stablelm2-12b"],
    "mamba": ["mamba", "mamba-untied"],
    "mamba2": ["mamba2"],
    "granitemoe": ["granitemoe", "granitemoeshared"],
    "arcee": ["arcee"],
    "exaone4": ["exaone4", "exaone4-swa"],
    "seed_oss": ["seed_oss"],
    "ernie4_5": ["ernie4_5"],
    "deepseek2": ["deepseek2", "deepseek3"],
    "glm4moe": ["glm4moe"],
    "llama4": ["llama4"],
    "gpt-oss": ["gpt-oss"],
    "ernie4_5-moe": ["ernie4_5-moe"],
    "apertus": ["apertus"],
    "hunyuan-dense": ["hunyuan-dense"],
    "lfm2": ["lfm2"],
    "jamba": ["jamba"],
    "qwen3next": ["qwen3next"],
    "granitehybrid": ["granitehybrid", "granitehybrid-dense"],
    "falcon-h1": ["falcon-h1"],
    "nemotron_h": ["nemotron_h"],
    "command-r": ["command-r", "command-r-plus"],
    "cohere2": ["cohere2"],
    "bert": ["bert"],
    "nomic-bert": ["nomic-bert"],
    "modern-bert": ["modern-bert"],
}


def _value(e: ir.Expr | ir.Dim, env: dict[str, float]) -> float:
    """The number a card expression or dimension stands for, under `env`."""
    if isinstance(e, ir.Num | ir.DimNum):
        return float(e.text) if isinstance(e, ir.Num) else e.value
    if isinstance(e, ir.Name | ir.DimName):
        return env[e.id if isinstance(e, ir.Name) else e.name]
    if isinstance(e, ir.Call) and e.func in ("max", "min"):  # lfm2's H_kv ≔ max(n_kv), of a per-layer list
        return {"max": max, "min": min}[e.func](env[e.args[0].id])
    left, right = _value(e.left, env), _value(e.right, env)
    op = {"·": "*", "-": "-"}.get(e.op, e.op)
    # operator's functions, so that only the one named runs (`L_all − N_n` with N_n = 0 divides by nothing)
    return {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[op](left, right)


def _hyperparameters(algo: ir.Algorithm, meta: dict, arch: str, tensors: dict) -> dict[str, float]:
    env: dict[str, float] = {}
    for d in algo.hyper_decls:
        b, name = d.binding, d.names[0]
        if not isinstance(d.type, ir.TensorType):  # enumerations and strings shape nothing
            continue
        if b is not None and b.kind == "derived" and isinstance(b.expr, ir.Call) and b.expr.func == "present":
            name_of = b.expr.args[0].value  # `present("blk.{l-1}.x", L)`: one flag per layer
            if len(b.expr.args) == 1:
                env[name] = int(name_of in tensors)
            else:
                count = int(_value(b.expr.args[1], env))
                env[name] = [int(re.sub(r"\{l-1\}", str(i), name_of) in tensors) for i in range(count)]
        elif b is not None and b.kind == "derived":
            env[name] = _value(b.expr, env)
        elif b is not None:
            keys = [s.tensor.replace("{arch}", arch) for s in b.sources[0]]
            present = [meta[k] for k in keys if k in meta]
            if present and isinstance(present[0], int | float | list):  # a list: one number per layer
                env[name] = present[0]
            elif not present and isinstance(b.default, ir.Num | ir.Name | ir.BinOp):  # d_r: d_e / H
                env[name] = _value(b.default, env)
    return env


def _prefix(group: ir.ParamGroup, layer: int, env: dict) -> str:
    """`"blk.{l-1}."` for layer 3 → `"blk.2."`."""
    scope = {**env, group.var: layer}
    return re.sub(r"\{([^}]*)\}", lambda m: str(eval(m.group(1), {}, scope)), group.prefix)  # noqa: S307


def _bound_tensors(algo: ir.Algorithm, env: dict, tensors: dict) -> list[tuple[str, tuple, tuple, bool]]:
    """(tensor, card shape, stored NumPy shape, transposed) for every parameter the file provides;
    for rows lo…hi of a fused tensor, the stored shape is theirs and the tensor is named with them
    (`blk.0.attn_qkv.weight[1:64]`)."""
    out = []
    for decl, group in algo.all_params():
        layers = range(1, int(env[group.bound.name]) + 1) if group else [None]
        for layer in layers:
            prefix = _prefix(group, layer, env) if group else ""
            for alternatives in decl.binding.sources:
                present = [s for s in alternatives if s.tensor and prefix + s.tensor in tensors]
                if present:
                    s = present[0]
                    stored = tensors[prefix + s.tensor]
                    if s.rows is None:
                        out.append((prefix + s.tensor, decl.type, stored, s.transpose))
                        continue
                    lo, hi = (int(_value(d, env)) for d in s.rows)
                    rows = (hi - lo + 1, *stored[1:]) if 1 <= lo <= hi <= stored[0] else (0,)
                    out.append((f"{prefix}{s.tensor}[{lo}:{hi}]", decl.type, rows, False))
    return out


def _covered(bound: list[tuple[str, tuple, tuple, bool]], tensors: dict) -> set[str]:
    """The file's tensors the card reads whole: bound as they are, or in parts covering every row."""
    whole = {t for t, *_ in bound if "[" not in t}
    rows: dict[str, set[int]] = {}
    for t, *_ in bound:
        if "[" in t:
            name, lo, hi = re.fullmatch(r"(.*)\[(\d+):(\d+)\]", t).groups()
            rows.setdefault(name, set()).update(range(int(lo), int(hi) + 1))
    return whole | {t for t, r in rows.items() if r == set(range(1, tensors[t][0] + 1))}


def _infer(algo: ir.Algorithm, env: dict, tensors: dict) -> None:
    """Fill in hyperparameters without a binding (N_V) from the shapes of bound tensors."""
    for _, typ, stored, transposed in _bound_tensors(algo, env, tensors):
        shape = stored[::-1] if transposed else stored
        for d, n in zip(typ.dims, shape):
            if isinstance(d, ir.DimName) and d.name not in env:
                env[d.name] = n


@pytest.mark.parametrize("name,case", [(n, c) for n in MODEL_CARDS for c in ORACLE_CASES.get(n, [])])
def test_model_card_shapes_match_llama_cpp_files(name, case, oracle_files):
    """Every tensor of a file the llama.cpp way is bound, with the card's shape (no loader involved)."""
    path = oracle_files(case).path
    reader = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items()}
    tensors = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    algo = load(name).main
    env = _hyperparameters(algo, meta, meta["general.architecture"], tensors)
    _infer(algo, env, tensors)
    bound = _bound_tensors(algo, env, tensors)
    wrong = []
    for tensor, typ, stored, transposed in bound:
        card_shape = tuple(int(_value(d, env)) for d in typ.dims)
        expected = stored[::-1] if transposed else stored
        while len(expected) > len(card_shape) and expected[0] == 1:  # llama.cpp: ggml's ne of 1 past the
            expected = expected[1:]  # expected axes (ERNIE 4.5 MoE's exp_probs_b, written [1, E])
        if card_shape != expected:
            wrong.append(
                f"{tensor}: card {card_shape}, file {expected}{' (transposed)' if transposed else ''}"
            )
    assert not wrong, f"{name}.card vs {case}: " + "; ".join(wrong)
    unbound = sorted(set(tensors) - _covered(bound, tensors))
    assert not unbound, f"{name}.card leaves tensors of {case} unbound: {unbound}"


# ── model cards compute what transformers computes (through codegen and the loader) ──────
IDS = list(range(3, 60))


def _worst(got, expected) -> str:
    diff = abs(got - expected)
    t, v = divmod(int(diff.argmax()), diff.shape[1])
    return f"max |card − transformers| = {diff.max():.3g} at position {t}, token {v}"


@pytest.mark.parametrize("target", ["numpy", "torch"])
# gemma, olmo2, gemma2 and gemma3 are held to transformers in test_models_oracle.py
@pytest.mark.parametrize(
    "case", ["gpt2", "llama", "llama-tied", "qwen2", "qwen3", "starcoder2", "granite", "smollm3"]
)
def test_model_card_logits_match_transformers(case, target, oracle_files):
    import toycards

    f = oracle_files(case)
    got, expected = toycards.load(str(f.path), target=target).logits(IDS), f.expected_logits(IDS)
    assert abs(got - expected).max() < 1e-4, f"{case} ({target}): {_worst(got, expected)}"


def _with_tensor(src, name: str, array):
    """A copy of the GGUF file `src` with one more tensor (llama.cpp writes rope_freqs this way)."""
    import numpy as np

    reader = gguf.GGUFReader(src)
    dst = src.with_suffix(".extra.gguf")
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if not key.startswith("GGUF.") and key != "general.architecture":
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(t.data))
    writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _llama3_rope_factors(theta: float, d_h: int, rope: dict):
    """rope_freqs.weight as llama.cpp's converter computes it from a `llama3` rope config."""
    import numpy as np

    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for i in range(0, d_h, 2):
        wavelength = 2 * math.pi * theta ** (i / d_h)
        if wavelength < old / high:
            out.append(1.0)
        elif wavelength > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


LINEAR = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA3 |= {"original_max_position_embeddings": 64, "rope_theta": 10000.0}


@pytest.mark.parametrize("rope", [LINEAR, LLAMA3], ids=["linear", "llama3"])
def test_llama_card_rope_scaling_matches_transformers(rope, tmp_path):
    """Linear scaling (ρ̃ ← ρ · s) and Llama 3 frequency factors (rope_freqs.weight), 57 positions."""
    from oracle.hf_gguf import head_dim, hf_logits, tiny_model, write_gguf

    import toycards

    model, config = tiny_model("llama", max_position_embeddings=128, rope_parameters=rope)
    if rope is LINEAR:
        keys = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": rope["factor"]}
        path = write_gguf(model, config, tmp_path / "linear.gguf", "llama", extra_kv=keys)
    else:
        factors = _llama3_rope_factors(rope["rope_theta"], head_dim(config), rope)
        path = _with_tensor(
            write_gguf(model, config, tmp_path / "l3.gguf", "llama"), "rope_freqs.weight", factors
        )
    got, expected = toycards.load(str(path), target="numpy").logits(IDS), hf_logits(model, IDS)
    assert abs(got - expected).max() < 1e-4, f"{rope['rope_type']}: {_worst(got, expected)}"


def test_qwen3_head_size_from_key_length_or_d_e_over_h():
    """`d_h … default d_e / H`: llama.cpp's n_embd_head_k falls back to n_embd / n_head."""
    from toycards.models.binding import bind_hyperparameters

    algo = library_card("qwen3").main
    meta = {
        "qwen3.block_count": 2,
        "qwen3.attention.head_count": 4,
        "qwen3.attention.head_count_kv": 2,
        "qwen3.embedding_length": 64,
        "qwen3.feed_forward_length": 128,
        "qwen3.context_length": 256,
        "qwen3.attention.layer_norm_rms_epsilon": 1e-6,
    }
    shapes = {"token_embd.weight": (288, 64)}
    values, source, problems = bind_hyperparameters(algo, meta, "qwen3", shapes)
    assert (values["d_h"], source["d_h"]) == (16, "default") and not problems
    values, source, problems = bind_hyperparameters(
        algo, {**meta, "qwen3.attention.key_length": 128}, "qwen3", shapes
    )
    assert (values["d_h"], source["d_h"]) == (128, 'key "qwen3.attention.key_length"') and not problems
