"""`toycards describe`: GGUF files → bound cards.

Checked against independent references: the Hugging Face configs the oracle files were written
from (`tests/oracle`), the `gguf` package's own reader (`gguf.GGUFReader`) for tensor counts,
types and token texts, `gguf.constants` for tensor roles, and hand-built files with one thing
wrong at a time. The round trip `describe --format card` → `check` → `gen` → `load` is run through
the command line for every library card and both targets.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner
from gguf_factory import (
    RawGGUF,
    RawKV,
    RawTensor,
    layout,
    llama_hparams,
    llama_inventory,
    typed,
    write_gguf,
)
from oracle.hf_gguf import ARCHS

from toycards.errors import ToycardsError
from toycards.inspect.describe import DescribedCard, _value_expr, describe
from toycards.inspect.formats import render_described, to_json
from toycards.inspect.inventory import model_tensor, tensor_role
from toycards.inspect.literals import number_expr
from toycards.lang import ir
from toycards.lang.parse import parse
from toycards.library import ARCH_CARDS
from toycards.models.binding import eval_scalar

V, Q = gguf.GGUFValueType, gguf.GGMLQuantizationType
IDS = [1, 5, 9, 2, 7, 3]

# card hyperparameter → how to read it from the oracle's transformers config
CONFIG_VALUES = {
    "gpt2": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads, "d_e": lambda c: c.hidden_size,
        "d_mlp": lambda c: c.n_inner or 4 * c.hidden_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.layer_norm_epsilon, "N_V": lambda c: c.vocab_size,
    },
    "llama": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
        "N_V": lambda c: c.vocab_size,
    },
    "gemma": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.head_dim, "N_V": lambda c: c.vocab_size,
        "θ_base": lambda c: c.rope_parameters["rope_theta"],  # 10000, llama.cpp's default: the file has no freq_base
    },
    "olmo2": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
        "N_V": lambda c: c.vocab_size, "θ_base": lambda c: c.rope_parameters["rope_theta"],
    },
    "gemma2": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.head_dim,
        "N_V": lambda c: c.vocab_size, "w": lambda c: c.sliding_window,
        "c_a": lambda c: c.attn_logit_softcapping, "c_f": lambda c: c.final_logit_softcapping,
        "θ_base": lambda c: c.rope_parameters["rope_theta"],  # 10000, llama.cpp's default: the file has no freq_base
    },
    "gemma3": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.head_dim,
        "N_V": lambda c: c.vocab_size, "w": lambda c: c.sliding_window,
        "θ_base": lambda c: c.rope_parameters["full_attention"]["rope_theta"],
        "θ_local": lambda c: c.rope_parameters["sliding_attention"]["rope_theta"],
        "s": lambda c: c.rope_parameters["full_attention"]["factor"], "c_f": lambda c: 0,  # no final soft-cap
    },
    "olmoe": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "E": lambda c: c.num_experts, "k": lambda c: c.num_experts_per_tok,
        "ε": lambda c: c.rms_norm_eps, "N_V": lambda c: c.vocab_size,
    },
    "mixtral": {  # a llama file with experts: llama_moe.card
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "E": lambda c: c.num_local_experts,
        "k": lambda c: c.num_experts_per_tok, "ε": lambda c: c.rms_norm_eps, "N_V": lambda c: c.vocab_size,
    },
    "qwen2moe": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "E": lambda c: c.num_experts, "k": lambda c: c.num_experts_per_tok,
        "d_x": lambda c: c.moe_intermediate_size, "d_s": lambda c: c.shared_expert_intermediate_size,
        "ε": lambda c: c.rms_norm_eps, "N_V": lambda c: c.vocab_size,
    },
    "phi3": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.rms_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
        "N_V": lambda c: c.vocab_size, "θ_base": lambda c: c.rope_parameters["rope_theta"],
        "ℓ_orig": lambda c: c.original_max_position_embeddings,
        "d_r": lambda c: int(c.rope_parameters.get("partial_rotary_factor", 1.0) * c.hidden_size)
        // c.num_attention_heads,
    },
    "phi2": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_mlp": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.layer_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
        "N_V": lambda c: c.vocab_size, "θ_base": lambda c: c.rope_parameters["rope_theta"],  # the default: no key
        "d_r": lambda c: int(c.rope_parameters["partial_rotary_factor"] * c.hidden_size) // c.num_attention_heads,
    },
    "stablelm": {
        "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
        "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
        "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
        "ε": lambda c: c.layer_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
        "N_V": lambda c: c.vocab_size, "θ_base": lambda c: c.rope_parameters["rope_theta"],  # the default: no key
        "d_r": lambda c: int(c.rope_parameters["partial_rotary_factor"] * (c.hidden_size // c.num_attention_heads)),
    },
}  # fmt: skip
CONFIG_VALUES["stablelm2-12b"] = CONFIG_VALUES["stablelm"]  # stablelm_parallel.card: the same hyperparameters
CONFIG_VALUES["arcee"] = CONFIG_VALUES["llama"]  # (d_h from key_length: the config's head_dim, d_e / H)
CONFIG_VALUES["granitemoe"] = CONFIG_VALUES["mixtral"] | {  # and granite's four multipliers
    "m_e": lambda c: c.embedding_multiplier, "m_r": lambda c: c.residual_multiplier,
    "m_a": lambda c: c.attention_multiplier, "m_z": lambda c: c.logits_scaling,
}  # fmt: skip
LIBRARY_CASES = ["gpt2", "llama", "llama-tied", "gemma", "olmo2", "gemma2", "gemma3"]
LIBRARY_CASES += ["olmoe", "qwen2moe", "mixtral"]  # mixtral: a llama file with experts (llama_moe.card)
LIBRARY_CASES += ["phi3", "phi3-partial", "phi2", "stablelm", "stablelm-nobias"]
LIBRARY_CASES += ["stablelm2-12b"]  # a stablelm file with per-head q/k norms: stablelm_parallel.card
LIBRARY_CASES += ["granitemoe", "arcee"]
CONFIG_VALUES["command-r"] = {  # command-r.card: Cohere's config, logit_scale as m_z
    "L": lambda c: c.num_hidden_layers, "H": lambda c: c.num_attention_heads,
    "H_kv": lambda c: c.num_key_value_heads, "d_e": lambda c: c.hidden_size,
    "d_ff": lambda c: c.intermediate_size, "ℓ_max": lambda c: c.max_position_embeddings,
    "ε": lambda c: c.layer_norm_eps, "d_h": lambda c: c.hidden_size // c.num_attention_heads,
    "N_V": lambda c: c.vocab_size, "θ_base": lambda c: c.rope_parameters["rope_theta"],
    "m_z": lambda c: c.logit_scale, "d_r": lambda c: c.hidden_size // c.num_attention_heads,
}  # fmt: skip
CONFIG_VALUES["command-r-plus"] = CONFIG_VALUES["command-r"]
CONFIG_VALUES["cohere2"] = CONFIG_VALUES["command-r"] | {  # and the window, 3 sliding layers of 4
    "w": lambda c: c.sliding_window, "n_p": lambda c: c.layer_types.index("full_attention") + 1,
}  # fmt: skip
LIBRARY_CASES += ["command-r", "cohere2"]
# every oracle case (tests/oracle/cases.py) whose architecture has a library card
ROUND_TRIP_CASES = [case for case, arch in [("gpt2", "gpt2"), ("llama", "llama"), ("qwen2", "qwen2"),
                                            ("qwen3", "qwen3"), ("starcoder2", "starcoder2"),
                                            ("granite", "granite"), ("smollm3", "smollm3"),
                                            ("gemma", "gemma"), ("olmo2", "olmo2"),
                                            ("gemma2", "gemma2"), ("gemma3", "gemma3"),
                                            ("olmoe", "olmoe"), ("qwen3moe", "qwen3moe"),
                                            ("qwen2moe", "qwen2moe"), ("mixtral", "llama"),
                                            ("phi3", "phi3"), ("phi3-longrope", "phi3"), ("phi2", "phi2"),
                                            ("stablelm", "stablelm"), ("stablelm-nobias", "stablelm"),
                                            ("phi2-fused", "phi2"), ("phi3-split", "phi3"), ("olmo3", "olmo2"),
                                            ("stablelm2-12b", "stablelm"), ("granitemoe", "granitemoe"),
                                            ("granitemoeshared", "granitemoe"),
                                            ("arcee", "arcee"), ("exaone4", "exaone4"),
                                            ("exaone4-swa", "exaone4"), ("seed_oss", "seed_oss"),
                                            ("command-r", "command-r"), ("command-r-plus", "command-r"),
                                            ("cohere2", "cohere2"), ("bert", "bert"),
                                            ("ernie4_5", "ernie4_5"), ("ernie4_5-moe", "ernie4_5-moe"),
                                            ("apertus", "apertus"),
                                            ("glm4moe", "glm4moe"), ("gpt-oss", "gpt-oss"), ("mamba2", "mamba2"),
                                            ("hunyuan-dense", "hunyuan-dense"), ("lfm2", "lfm2"),
                                            ("nomic-bert", "nomic-bert"), ("deepseek2", "deepseek2"),
                                            ("modern-bert", "modern-bert"),
                                            ("deepseek3", "deepseek2"), ("jamba", "jamba"),
                                            ("granitehybrid", "granitehybrid"), ("granitehybrid-dense", "granitehybrid"),
                                            ("llama4", "llama4")]
                    if arch in ARCH_CARDS]  # fmt: skip
ROUND_TRIP_CASES += ["falcon-h1"]  # attention and a Mamba-2 mixer side by side in every block
ROUND_TRIP_CASES += ["qwen3next"]
ROUND_TRIP_CASES += ["nemotron_h"]  # Mamba-2, attention and MLP blocks by two per-block keys


def cli(*args: str):
    """`toycards ARGS…`, in process."""
    from toycards.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def card_values(card) -> dict[str, object]:
    """`= value` of every hyperparameter of the card's entry algorithm, evaluated."""
    return {
        n: eval_scalar(d.value, {}, frozenset(getattr(d.type, "options", ())))
        for d in card.main.hyper_decls
        if d.value is not None
        for n in d.names
    }


def same_number(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return bool(np.float32(a) == np.float32(b))
    return a == b


# ── library cards on oracle files ───────────────────────────────────────────────────────
@pytest.mark.parametrize("case", LIBRARY_CASES)
def test_bound_card_values_come_from_the_config(case, oracle_files):
    f = oracle_files(case)
    card = describe(f.path)
    assert isinstance(card, DescribedCard) and card.origin == "library"
    assert card.problems == (), [p.message for p in card.problems]
    values = card_values(card)
    for name, read in CONFIG_VALUES[f.arch].items():
        assert same_number(values[name], read(f.config)), (
            f"{name}: card {values[name]}, config {read(f.config)}"
        )
    if f.arch == "llama":
        from oracle.hf_gguf import rope_theta

        assert same_number(values["θ_base"], rope_theta(f.config))
        assert values["scaling"] == "none" and values["s"] == 1


@pytest.mark.parametrize("case", LIBRARY_CASES)
def test_header_agrees_with_gguf_reader(case, oracle_files):
    f = oracle_files(case, "Q8_0")
    header = describe(f.path).header
    reader = gguf.GGUFReader(f.path)
    assert header.n_params == sum(int(t.n_elements) for t in reader.tensors)
    assert header.tensor_types == dict(Counter(t.tensor_type.name for t in reader.tensors))
    assert header.n_tensors == len(reader.tensors)
    assert header.file_size == Path(f.path).stat().st_size
    assert header.context_length == f.config.max_position_embeddings
    assert header.architecture == gguf.MODEL_ARCH_NAMES[ARCHS[f.arch].gguf_arch]  # mixtral: llama
    assert header.general["general.name"] == f"toycards oracle {f.arch}"
    assert header.general["general.file_type"] == "7 (Q8_0)"  # gguf.LlamaFileType.MOSTLY_Q8_0
    tokens = reader.fields["tokenizer.ggml.tokens"]
    bos = int(reader.fields["tokenizer.ggml.bos_token_id"].contents())
    assert header.tokenizer["vocab_size"] == len(tokens.data)
    assert header.tokenizer["special"]["bos"] == {"id": bos, "text": tokens.contents()[bos]}
    assert (
        header.rope["type"]
        == {
            "gpt2": "none",
            "llama": "norm",
            "gemma": "neox",
            "olmo2": "neox",
            "gemma2": "neox",
            "gemma3": "neox",
            "olmoe": "neox",
            "qwen2moe": "neox",
            "phi3": "neox",
            "phi2": "neox",
            "stablelm": "neox",
            "granitemoe": "norm",
            "arcee": "norm",
            "command-r": "norm",
            "cohere2": "norm",
        }[header.architecture]
    )
    assert header.chat_template is None


def test_rope_types_follow_design_facts():
    from toycards.inspect.header import ROPE_TYPES

    for arch in [
        "llama",
        "deci",
        "baichuan",
        "internlm2",
        "minicpm",
        "command-r",
        "olmo",
        "deepseek2",
        "granite",
    ]:
        assert ROPE_TYPES[arch] == "norm", arch
    for arch in ["falcon", "stablelm", "qwen", "qwen2", "qwen3", "qwen3moe", "olmo2", "phi2", "phi3", "gemma",
                 "gemma2", "gemma3", "starcoder2", "gptneox", "nemotron"]:  # fmt: skip
        assert ROPE_TYPES[arch] == "neox", arch
    for arch in ["gpt2", "bloom", "mamba"]:
        assert ROPE_TYPES[arch] == "none", arch


@pytest.mark.parametrize("case", ROUND_TRIP_CASES)
def test_round_trip(case, oracle_files, tmp_path):
    """describe --format card > m.card; check m.card; gen m.card; load(m.card, weights) == load(m.gguf)."""
    from toycards.checker import check
    from toycards.codegen import generate_source
    from toycards.models.load import load

    f = oracle_files(case)
    out = cli("describe", str(f.path), "--format", "card")
    assert out.exit_code == 0, out.output
    card_path = tmp_path / f"{case}.card"
    card_path.write_text(out.stdout, encoding="utf-8")
    card = parse(card_path)
    assert card == describe(f.path) and check(card) == []
    for target in ("numpy", "torch"):
        ast.parse(generate_source(card, target))
        ours = load(card_path, weights=str(f.path), target=target).logits(IDS)
        direct = load(str(f.path), target=target).logits(IDS)
        worst = np.unravel_index(np.abs(ours - direct).argmax(), ours.shape)
        assert np.array_equal(ours, direct), (
            f"{target}: worst difference {np.abs(ours - direct).max()} at {worst}"
        )


def test_round_trip_through_toycards_commands(oracle_files, tmp_path):
    """The same through the installed command line: `python -m toycards describe | check | gen`."""
    path = oracle_files("llama").path

    def run(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "toycards", *args]
        return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)

    with open(tmp_path / "m.card", "w", encoding="utf-8") as fh:
        assert run("describe", str(path), "--format", "card", stdout=fh).returncode == 0
    assert run("check", str(tmp_path / "m.card")).returncode == 0
    gen = run("gen", str(tmp_path / "m.card"), "--target", "numpy", "-o", str(tmp_path / "m.py"))
    assert gen.returncode == 0, gen.stderr
    ast.parse((tmp_path / "m.py").read_text(encoding="utf-8"))


def test_described_card_loads_directly(oracle_files):
    from toycards.models.load import load

    f = oracle_files("llama-tied")
    card = describe(f.path)
    ours = load(card, weights=str(f.path)).logits(IDS)
    np.testing.assert_allclose(ours, f.expected_logits(IDS), rtol=1e-4, atol=1e-4)


# ── embedded cards ──────────────────────────────────────────────────────────────────────
def _embedded(oracle_files, tmp_path, edit) -> Path:
    from oracle.hf_gguf import write_gguf as write_oracle

    model, config = oracle_files.model("gpt2")
    text = edit(Path("toycards/library/cards/gpt2.card").read_text(encoding="utf-8"))
    return write_oracle(model, config, tmp_path / "embedded.gguf", "gpt2", extra_kv={"toycards.card": text})


def test_embedded_card_is_used(oracle_files, tmp_path):
    from toycards.models.load import load

    path = _embedded(oracle_files, tmp_path, lambda t: t.replace("P ← GPT2(x | θ)", "P ← MyGPT(x | θ)"))
    card = describe(path)
    assert card.origin == "embedded" and card.main.name == "MyGPT"
    assert card.problems == ()
    assert card_values(card)["L"] == 2
    np.testing.assert_array_equal(load(card, weights=str(path)).logits(IDS), load(str(path)).logits(IDS))


def test_embedded_card_is_checked_against_the_tensors(oracle_files, tmp_path):
    def edit(text: str) -> str:
        text = text.replace('from "attn_qkv.weight"', 'from "attn_qkv2.weight"')
        return text.replace('L ∈ ℕ      from "{arch}.block_count"', 'L ∈ ℕ = 3  from "{arch}.block_count"')

    card = describe(_embedded(oracle_files, tmp_path, edit))
    messages = [p.message for p in card.problems]
    assert any("'blk.0.attn_qkv2.weight'" in m and "missing" in m for m in messages), messages
    assert any("unexpected tensor 'blk.1.attn_qkv.weight'" in m for m in messages), messages
    assert any("L = 3" in m and "2" in m for m in messages), messages


# ── mismatches, one at a time ───────────────────────────────────────────────────────────
def tiny_llama(path: Path, drop_key: str = "", tensors: dict | None = None, kv: dict | None = None) -> Path:
    rng = np.random.default_rng(0)
    inventory = dict(llama_inventory(n_layer=2, d_e=8, d_ff=16, n_vocab=32, n_head=2, n_head_kv=1))
    inventory.update(tensors or {})
    meta = {k.key: typed(k.value, k.vtype) for k in llama_hparams(2, 8, 16, 2, 1, n_ctx=64)}
    meta.pop("general.architecture")
    meta.update(kv or {})
    meta.pop(drop_key, None)
    arrays = {n: rng.normal(size=s).astype(np.float32) for n, s in inventory.items() if s is not None}
    return write_gguf(path, kv=meta, tensors=arrays)


@pytest.mark.parametrize(
    "change, severity, words",
    [
        (dict(tensors={"blk.1.ffn_up.weight": None}), "error", ["'blk.1.ffn_up.weight'", "missing"]),
        (dict(tensors={"blk.0.attn_q.bias": (8,)}), "warning", ["unexpected tensor 'blk.0.attn_q.bias'"]),
        (dict(tensors={"blk.0.attn_k.weight": (8, 8)}), "error", ["'blk.0.attn_k.weight'", "[8×8]", "[4×8]"]),
        (dict(drop_key="llama.attention.layer_norm_rms_epsilon"), "error",
         ["'llama.attention.layer_norm_rms_epsilon'", "ε", "no default"]),
        (dict(kv={"llama.context_length": typed(0, V.UINT32)}), "warning", ["llama.context_length = 0"]),
    ],
)  # fmt: skip
def test_each_mismatch_is_named(tmp_path, change, severity, words):
    card = describe(tiny_llama(tmp_path / "m.gguf", **change))
    hits = [p for p in card.problems if all(w in p.message for w in words)]
    assert hits, [p.message for p in card.problems]
    assert hits[0].severity == severity
    out = cli("describe", str(tmp_path / "m.gguf"), "--format", "card")
    assert out.exit_code == (1 if severity == "error" else 0)
    assert words[0] in out.stderr


def test_clean_tiny_llama_has_no_problems(tmp_path):
    card = describe(tiny_llama(tmp_path / "m.gguf"))
    assert card.problems == () and card.origin == "library"


def test_unknown_tensor_type_keeps_the_metadata(tmp_path):
    """The reader keeps a tensor of a type it does not know (gguf/header.py: `known_type` false,
    `type_name` "unknown(N)") where gguf.GGUFReader drops the whole file; describe then shows the
    metadata and counts the type, and names the tensor as an error only where the card binds it."""
    infos = [RawTensor("token_embd.weight", (8, 32), 0, 0), RawTensor("output_norm.weight", (8,), 99, 1024)]
    kv = [RawKV("general.architecture", V.STRING, "llama"), RawKV("general.name", V.STRING, "odd")]
    card = describe(RawGGUF(kv=kv, tensors=infos, data=bytes(2048)).write(tmp_path / "odd.gguf"))
    assert card.header.general["general.name"] == "odd"
    assert card.header.tensor_types == {"F32": 1, "unknown(99)": 1}
    assert not any("cannot read" in p.message for p in card.problems)  # no card parameter binds it here

    # a complete tiny Llama whose output norm has type 99: the card binds γ to it
    specs = [(name, shape, Q.F32) for name, shape in llama_inventory(2, 8, 16, 32, 2, 1, tied=True)]
    known = [spec for spec in specs if spec[0] != "output_norm.weight"]
    infos, size = layout(known)
    infos.append(RawTensor("output_norm.weight", (8,), 99, size))
    path = RawGGUF(kv=llama_hparams(2, 8, 16, 2, 1), tensors=infos, data=bytes(size)).write(
        tmp_path / "m.gguf"
    )
    card = describe(path)
    assert card.header.tensor_types == {"F32": len(known), "unknown(99)": 1}
    assert [(p.severity, p.message) for p in card.errors] == [
        ("error", "tensor 'output_norm.weight' has type unknown(99), which toycards cannot read")
    ]
    out = cli("describe", str(path), "--format", "card")
    assert out.exit_code == 1 and "which toycards cannot read" in out.stderr


# ── architectures without a card ────────────────────────────────────────────────────────
def arch_file(path: Path, arch: str, with_tensors: bool = True) -> Path:
    """A tiny file of `arch`: typical {arch}.* keys and every tensor gguf.constants lists for it."""
    member = next((m for m in gguf.MODEL_ARCH if gguf.MODEL_ARCH_NAMES[m] == arch), None)
    kv = {
        f"{arch}.block_count": typed(2, V.UINT32),
        f"{arch}.context_length": typed(64, V.UINT32),
        f"{arch}.embedding_length": typed(5, V.UINT32),
        f"{arch}.attention.head_count": typed(1, V.UINT32),
        f"{arch}.attention.head_count_kv": typed([1, 1], V.ARRAY, V.INT32),
        f"{arch}.attention.layer_norm_epsilon": typed(1e-5, V.FLOAT32),
        f"{arch}.rope.freq_base": typed(10000.0, V.FLOAT32),
        f"{arch}.use_parallel_residual": typed(True, V.BOOL),
        f"{arch}.pooling_kind": typed("mean", V.STRING),
    }
    tensors = {}
    listed = gguf.MODEL_TENSORS.get(member, [gguf.MODEL_TENSOR.TOKEN_EMBD, gguf.MODEL_TENSOR.ATTN_Q])
    for t in listed if with_tensors else ():
        template = gguf.TENSOR_NAMES[t]
        for bid in (0, 1) if "{bid}" in template else (None,):
            tensors[template.format(bid=bid) + ".weight"] = np.full((3, 5), 0.5, np.float32)
    return write_gguf(path, kv=kv, tensors=tensors, arch=arch)


def expected_tensor_enums(arch: str) -> dict[str, str]:
    """Tensor name → MODEL_TENSOR name, straight from gguf.constants."""
    member = next(m for m in gguf.MODEL_ARCH if gguf.MODEL_ARCH_NAMES[m] == arch)
    out = {}
    for t in gguf.MODEL_TENSORS[member]:
        template = gguf.TENSOR_NAMES[t]
        for bid in (0, 1) if "{bid}" in template else (None,):
            out[template.format(bid=bid) + ".weight"] = t.name
    return out


# general.architecture → the algorithm name by hand: words capitalised, separators dropped
ALGORITHM_NAMES = {"qwen2": "Qwen2", "gptneox": "Gptneox", "gemma2": "Gemma2", "falcon": "Falcon", "mamba": "Mamba",
                   "bert": "Bert", "starcoder2": "Starcoder2", "rwkv6": "Rwkv6", "t5encoder": "T5encoder",
                   "nomic-bert": "NomicBert", "bloom": "Bloom", "mpt": "Mpt", "internlm2": "Internlm2",
                   "dbrx": "Dbrx", "orion": "Orion"}  # fmt: skip
WITHOUT_CARDS = [a for a in ["qwen2", "gptneox", "gemma2", "falcon", "mamba", "bert", "starcoder2", "rwkv6",
                             "t5encoder", "nomic-bert", "bloom", "mpt", "internlm2", "dbrx", "orion"]
                 if a not in ARCH_CARDS][:6]  # fmt: skip


def test_enough_architectures_without_cards():
    assert len(WITHOUT_CARDS) >= 5


@pytest.mark.parametrize("arch", WITHOUT_CARDS)
def test_declaration_only_card(arch, tmp_path):
    from toycards.checker import check
    from toycards.codegen import generate_source

    path = arch_file(tmp_path / f"{arch}.gguf", arch)
    card = describe(path)
    assert card.origin == "declaration-only" and card.declaration_only and card.main.body == ()
    assert arch in card.notice and "declaration-only" in card.notice
    assert not card.errors, [p.message for p in card.errors]
    # every tensor is declared once, bound to its own name, with its gguf.constants role
    bound = {p.tensor for p in card.bound.params}
    reader = gguf.GGUFReader(path)
    assert bound == {t.name for t in reader.tensors} and card.bound.unused_tensors == []
    text = str(card)
    for name, enum in expected_tensor_enums(arch).items():
        stem = name.split(".")[-2] if "blk." in name else name.removesuffix(".weight")  # blk., enc.blk.
        lines = [ln for ln in text.splitlines() if f'"{stem}.weight"' in ln or f'"{name}"' in ln]
        assert lines and all(f"({enum})" in ln for ln in lines), (name, enum, lines)
    # every scalar {arch}.* key is a hyperparameter with the file's value and its key as binding
    values, keys = card_values(card), {}
    for d in card.main.hyper_decls:
        keys[d.binding.sources[0][0].tensor.replace("{arch}", arch)] = d.names[0]
    for field in reader.fields.values():
        if field.name.startswith(f"{arch}.") and len(field.types) == 1:
            name = keys[field.name]
            assert same_number(values[name], field.contents()) or values[name] == field.contents(), name
    assert keys[f"{arch}.block_count"] == "L" and keys[f"{arch}.embedding_length"] == "d_e"
    assert check(card) == []
    with pytest.raises(ToycardsError, match="declaration-only"):
        generate_source(card, "numpy")


@pytest.mark.parametrize("arch", WITHOUT_CARDS[:2])
def test_declaration_only_through_the_command_line(arch, tmp_path):
    path = arch_file(tmp_path / f"{arch}.gguf", arch)
    out = cli("describe", str(path), "--format", "card")
    assert out.exit_code == 0, out.output
    notice = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(notice) == 1 and "declaration-only" in notice[0]
    # arch_file writes no vocabulary, so N_V is unknown and the output is the undeclared y
    lines = out.stdout.splitlines()
    assert f"Algorithm: y ← {ALGORITHM_NAMES[arch]}(x | θ)" in lines, lines[:12]
    assert "Output: y ∈ ℝ  ▷ unknown: the file does not say" in lines, lines[:12]
    from toycards.codegen import generate_source

    with pytest.raises(ToycardsError, match="declaration-only"):
        generate_source(parse(out.stdout), "numpy")


@pytest.mark.parametrize("arch", WITHOUT_CARDS)
def test_declaration_only_card_text_parses_and_checks(arch, tmp_path):
    from toycards.checker import check

    card = describe(arch_file(tmp_path / "m.gguf", arch))
    again = parse(str(card))
    assert again == card and check(again) == []


@pytest.mark.parametrize("member", [m.name for m in gguf.MODEL_ARCH])
def test_every_gguf_architecture(member, tmp_path):
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH[member]]
    if arch in ARCH_CARDS:
        pytest.skip("has a library card")
    card = describe(arch_file(tmp_path / "m.gguf", arch))
    assert card.declaration_only and not card.errors
    files = {t for t in card.header.tensors}
    assert {p.tensor for p in card.bound.params} == files


def test_unknown_architecture_string(tmp_path):
    card = describe(arch_file(tmp_path / "m.gguf", "frobnicator-9000"))
    assert card.declaration_only and card.main.name == "Frobnicator9000"
    assert "unknown to gguf too" in card.notice and not card.errors
    assert card_values(card)["L"] == 2
    assert {p.tensor for p in card.bound.params} == {
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.1.attn_q.weight",
    }
    assert parse(str(card)) == card


def test_no_tensors_at_all(tmp_path):
    card = describe(arch_file(tmp_path / "m.gguf", "qwen2", with_tensors=False))
    assert card.declaration_only and "no tensors" in card.notice


# the shared vocabularies: ../shared/vocab beside the checkout
VOCAB = Path(__file__).resolve().parents[2].parent / "shared" / "vocab"


@pytest.mark.skipif(not VOCAB.is_dir(), reason=f"no shared vocabularies beside this checkout ({VOCAB})")
def test_vocabulary_only_file():
    card = describe(VOCAB / "ggml-vocab-llama-spm.gguf")
    assert card.declaration_only and "no tensors" in card.notice
    assert card.header.tokenizer["model"] == "llama" and card.header.tokenizer["vocab_size"] == 32000
    assert card_values(card)["N_V"] == 32000


def test_tensor_roles_from_gguf_constants():
    assert model_tensor("blk.7.ffn_gate_exps.weight", "qwen3moe") == gguf.MODEL_TENSOR.FFN_GATE_EXP
    assert tensor_role("blk.0.attn_qkv.weight", "phi3") == "fused query/key/value (ATTN_QKV)"
    assert tensor_role("not_a_tensor", "llama").startswith("role unknown")


# ── chat template and formats ───────────────────────────────────────────────────────────
def test_chat_template_is_shown_never_rendered(tmp_path):
    template = "{{ raise_exception('rendered!') }}{% for m in messages %}{{ m.content }}{% endfor %}"
    path = tiny_llama(tmp_path / "m.gguf", kv={"tokenizer.chat_template": typed(template, V.STRING)})
    card = describe(path)
    assert card.header.chat_template == template
    assert ("chat template", f"present ({len(template)} characters)") in card.header.rows()
    assert json.loads(render_described(card, "json"))["header"]["chat_template"] == template


def test_formats(oracle_files):
    f = oracle_files("gpt2")
    card = describe(f.path)
    data = json.loads(render_described(card, "json"))
    assert data["hyperparameters"]["L"] == {"value": 2, "source": 'key "gpt2.block_count"'}
    assert data["header"]["n_params"] == card.header.n_params and data["origin"] == "library"
    assert {p["tensor"] for p in data["parameters"]} >= {"token_embd.weight", "blk.1.ffn_down.bias"}
    assert parse(data["card"]) == card and data == to_json(card) | {"ir": data["ir"]}
    md = render_described(card, "markdown")
    assert "| architecture | gpt2 |" in md and "ℕ = 2" in md and "block_count" in md
    html = render_described(card, "html")
    assert "&lt;|endoftext|&gt;" in html and "<|endoftext|>" not in html
    latex = render_described(card, "latex")
    assert r"file\_type" in latex and r"\begin{tabular}" in latex and r"\textless{}|endoftext|" not in latex
    assert (
        r"'\textless{}\textbar{}endoftext\textbar{}\textgreater{}'" in latex
        and "×" not in latex.split("tabular")[1]
    )
    text = render_described(card, "text")
    assert "tensor types" in text and "F32 ×28" in text


@pytest.mark.parametrize("fmt", ["json", "markdown", "latex", "html", "text", "card"])
def test_formats_on_the_command_line(fmt, oracle_files):
    out = cli("describe", str(oracle_files("llama").path), "--format", fmt)
    assert out.exit_code == 0 and "llama" in out.stdout


def test_default_view_shows_header_and_card(oracle_files):
    out = cli("describe", str(oracle_files("llama").path))
    assert out.exit_code == 0
    for words in ["RoPE", "NORM", "tokenizer", "L ∈ ℕ = 2"]:
        assert words in out.stdout


# ── bad files ───────────────────────────────────────────────────────────────────────────
def one_line_failure(path: Path) -> str:
    out = cli("describe", str(path))
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert out.exit_code == 1 and len(lines) == 1, out.output
    assert "Traceback" not in out.output
    return lines[0]


def test_not_a_gguf_file(tmp_path):
    (tmp_path / "a.gguf").write_text("hello, I am a text file")
    assert "not a GGUF file" in one_line_failure(tmp_path / "a.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert "empty" in one_line_failure(tmp_path / "empty.gguf")
    assert "no such file" in one_line_failure(tmp_path / "missing.gguf")


def test_truncated_at_many_offsets(tmp_path):
    good = tiny_llama(
        tmp_path / "good.gguf", kv={"tokenizer.ggml.tokens": typed(["a", "b"], V.ARRAY, V.STRING)}
    )
    data = good.read_bytes()
    header_end = min(int(t.data_offset) for t in gguf.GGUFReader(good).tensors)  # where tensor data starts
    cuts = sorted(set(range(4, header_end, max(1, header_end // 80))) | {header_end - 1, len(data) - 1})
    for cut in cuts:
        path = tmp_path / "cut.gguf"
        path.write_bytes(data[:cut])
        line = one_line_failure(path)
        assert str(path) in line, (cut, line)


ABSURD = {
    "n_kv": RawGGUF(kv=[], n_kv=2**63 - 1),
    "n_tensors": RawGGUF(kv=[RawKV("general.architecture", V.STRING, "llama")], n_tensors=2**62),
    "key length": RawGGUF(kv=[RawKV(b"", 0, raw=(2**62).to_bytes(8, "little") + b"abc")]),
    "string length": RawGGUF(kv=[RawKV("general.name", V.STRING, payload=(2**60).to_bytes(8, "little"))]),
    "array count": RawGGUF(
        kv=[
            RawKV(
                "tokenizer.ggml.tokens", V.ARRAY, payload=bytes([8, 0, 0, 0]) + (2**61).to_bytes(8, "little")
            )
        ]
    ),
    "dims": RawGGUF(tensors=[RawTensor("w", (2**40, 2**40, 2**40), 0, 0)]),
    "n_dims": RawGGUF(tensors=[RawTensor("w", (1,) * 1000, 0, 0)]),
    "data past end": RawGGUF(tensors=[RawTensor("w", (1024, 1024), 0, 0)], data=bytes(64)),
    "offset past end": RawGGUF(tensors=[RawTensor("w", (8,), 0, 1 << 40)], data=bytes(64)),
}


@pytest.mark.parametrize("what", list(ABSURD))
def test_absurd_files_fail_in_one_line_and_bounded_memory(what, tmp_path):
    path = ABSURD[what].write(tmp_path / "absurd.gguf")
    one_line_failure(path)
    tracemalloc.start()
    try:
        with pytest.raises(ToycardsError) as err:
            describe(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(err.value)
    assert peak < 8 * 2**20, f"{what}: describe allocated {peak / 2**20:.1f} MiB"


def test_bad_file_in_a_fresh_process(tmp_path):
    path = ABSURD["n_tensors"].write(tmp_path / "absurd.gguf")
    done = subprocess.run(
        [sys.executable, "-m", "toycards", "describe", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_public_api_after_the_module_is_imported(oracle_files):
    import toycards
    import toycards.inspect.describe  # noqa: F401 - makes `toycards.describe` the module object

    card = toycards.describe(oracle_files("gpt2").path)
    assert isinstance(card, DescribedCard) and card.origin == "library"


def test_number_literals_as_float32_metadata_reads_them():
    """Card literals for metadata numbers: the shortest text that reads back as the same float32
    (hand-checked values), NumPy scalars as plain numbers, and no literal for inf or NaN."""
    real = ir.TensorType("R")
    assert number_expr(9.999999747378752e-06, float32=True) == ir.Num("1e-05")
    assert number_expr(0.10000000149011612, float32=True) == ir.Num("0.1")
    assert number_expr(0.1, float32=False) == ir.Num("0.1")
    assert number_expr(np.int32(-3)) == ir.UnOp("-", ir.Num("3"))
    assert number_expr(np.float32(0.5), float32=True) == ir.Num("0.5")
    assert number_expr(np.bool_(True)) == ir.Num("1")
    assert _value_expr(np.float32(2.0), real, True) == ir.Num("2.0")
    assert _value_expr(float("inf"), real, True) is None and _value_expr(float("nan"), real, False) is None


# ── a folder with one tiny file per library family: listed, and each described by its card ──
def test_a_folder_of_every_family_lists_and_describes_each_with_its_library_card(oracle_files, tmp_path):
    """`toycards list` finds one file per architecture of ARCH_CARDS (and a llama file with
    experts); `describe` gives each its library card (never the declaration-only fallback), which
    parses back and checks."""
    import shutil

    from oracle.cases import CASES

    from toycards.checker import check

    folder = tmp_path / "models"
    folder.mkdir()
    wanted: dict[str, str] = {}
    for case, (arch, _) in CASES.items():
        card = {"mixtral": "llama_moe", "stablelm2-12b": "stablelm_parallel"}.get(case, ARCH_CARDS.get(arch))
        if card is not None and card not in wanted.values():
            wanted[case] = card
            shutil.copy(oracle_files(case).path, folder / f"{case}.gguf")
    assert set(wanted.values()) >= set(ARCH_CARDS.values()), "an architecture without an oracle file"
    out = cli("list", "--dir", str(folder), "--no-caches", "--json")
    assert out.exit_code == 0, out.output
    assert {e["name"] for e in json.loads(out.stdout)} == {f"{c}.gguf" for c in wanted}
    for case, card in wanted.items():
        path = folder / f"{case}.gguf"
        described = describe(path)
        assert described.origin == "library" and Path(described.card_path).stem == card, (
            case,
            described.origin,
        )
        text = cli("describe", str(path), "--format", "card")
        assert text.exit_code == 0, f"{case}: {text.output}"
        assert check(parse(text.stdout)) == [], case
