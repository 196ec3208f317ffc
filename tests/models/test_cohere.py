"""Command R (general.architecture = "command-r") and Command R7B ("cohere2"): what the shared suites
do not show.

The shared suites hold `command-r` (2 blocks: no q/k norms), `command-r-plus` (64 blocks with
per-head q/k LayerNorms, which llama.cpp reads from 64 blocks on only) and `cohere2` (3 sliding
layers with RoPE to 1 global without) against transformers. Here: that each rule the cards take from
llama.cpp moves the logits, so that agreeing with transformers shows the card computes it (the logit
scale, with 0 read as no scale; the RoPE base; the window); that cohere2's sliding layers are the
ones llama.cpp picks from `attention.sliding_window_pattern` (4 when absent, 0: every layer), and
that they rotate with rope.freq_base, not rope.freq_base_swa; that every query and key head is
normalised by its own row of attn_q_norm / attn_k_norm; and that the card's stem, "command-r" with
its hyphen, names it as any other (a user folder's command-r.card first).
"""

from __future__ import annotations

import copy

import gguf
import numpy as np
import pytest
from oracle.hf_gguf import hf_logits, tiny_model, write_gguf
from test_models_oracle import ATOL, assert_logits_close, ids_for, worst

from toycards.models.load import load

VT = gguf.GGUFValueType

# each changed key moves the logits far from transformers' (which the unchanged file matches)
FEATURES = [
    ("command-r", {"command-r.logit_scale": 1.0}),  # measured |Δ| 12
    ("command-r", {"command-r.rope.freq_base": 10000.0}),  # 0.94: llama.cpp's default, not 1000
    ("cohere2", {"cohere2.attention.sliding_window": 1000}),  # 6.0: no window
    ("cohere2", {"cohere2.attention.sliding_window_pattern": (1, VT.UINT32)}),  # 5.9: every layer global
]


@pytest.mark.parametrize("case, change", FEATURES, ids=[next(iter(c)) for _, c in FEATURES])
def test_each_rule_moves_the_logits(oracle_files, case, change, tmp_path):
    f = oracle_files(case, "F32")
    ids = ids_for(f.config.vocab_size, 16)
    path = write_gguf(f.model, f.config, tmp_path / "changed.gguf", f.arch, extra_kv=change)
    got, want = load(path, target="numpy").logits(ids), hf_logits(f.model, ids)
    assert np.abs(got - want).max() > 100 * ATOL, f"{case} {change}: {worst(got, want)}"


@pytest.mark.parametrize("scale, applied", [(2.0, 2.0), (0.0, 1.0)])
def test_logit_scale_multiplies_the_logits_and_zero_is_none(oracle_files, scale, applied, tmp_path):
    """command-r.cpp scales the logits by f_logit_scale only when it is not 0."""
    f = oracle_files("command-r", "F32")
    model = copy.deepcopy(f.model)
    model.logit_scale = applied  # CohereForCausalLM multiplies by it at every forward
    path = write_gguf(
        f.model, f.config, tmp_path / "s.gguf", "command-r", extra_kv={"command-r.logit_scale": scale}
    )
    ids = ids_for(f.config.vocab_size, 12)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(model, ids), what=f"scale {scale}")


# attention.sliding_window_pattern → transformers' layer_types of the same blocks (llama.cpp's
# set_swa_pattern(n): block il slides iff n = 0 or il mod n < n − 1)
PATTERNS = [
    (2, ["sliding_attention", "full_attention"] * 2),
    (0, ["sliding_attention"] * 4),
    (3, ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]),
]


@pytest.mark.parametrize("target", ["numpy", "torch"])
@pytest.mark.parametrize("pattern, layer_types", PATTERNS, ids=[str(p) for p, _ in PATTERNS])
def test_cohere2_slides_the_blocks_of_the_files_pattern(oracle_files, pattern, layer_types, target, tmp_path):
    model, config = tiny_model("cohere2", layer_types=layer_types)  # seed 0: the oracle case's weights
    key = {"cohere2.attention.sliding_window_pattern": (pattern, VT.UINT32)}
    path = write_gguf(model, config, tmp_path / f"p{pattern}.gguf", "cohere2", extra_kv=key)
    ids = ids_for(config.vocab_size, 16)
    want = hf_logits(model, ids)
    assert_logits_close(load(path, target=target).logits(ids), want, what=f"pattern {pattern} {target}")
    moved = np.abs(want - hf_logits(oracle_files("cohere2").model, ids)).max()  # measured 2.7 to 3.6
    assert moved > 100 * ATOL, f"pattern {pattern} gives the default pattern's logits ({moved:.3g})"


def test_cohere2_sliding_layers_rotate_with_freq_base_not_freq_base_swa(oracle_files, tmp_path):
    """llama.cpp reads rope.freq_base_swa for cohere2, but its graph passes freq_base to ggml_rope_ext."""
    f = oracle_files("cohere2", "F32")
    path = write_gguf(
        f.model, f.config, tmp_path / "swa.gguf", "cohere2", extra_kv={"cohere2.rope.freq_base_swa": 10.0}
    )
    ids = ids_for(f.config.vocab_size, 16)
    assert_logits_close(load(path, target="numpy").logits(ids), hf_logits(f.model, ids), what="freq_base_swa")


def test_each_head_is_normalised_by_its_own_row(oracle_files, tmp_path):
    """Command R+'s q/k norms: the same model with every layer's rows of q_norm and k_norm reversed
    (head h gets head H−h+1's scales; the tiny k_norm has one row) still matches toycards, and is far
    from the original (measured 0.45)."""
    import torch

    f = oracle_files("command-r-plus", "F32")
    swapped = copy.deepcopy(f.model)
    with torch.no_grad():
        for layer in swapped.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.copy_(norm.weight.flip(0))
    path = write_gguf(swapped, f.config, tmp_path / "swapped.gguf", "command-r-plus")
    ids = ids_for(f.config.vocab_size, 12)
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hf_logits(swapped, ids), what="rows reversed")
    moved = np.abs(got - hf_logits(f.model, ids)).max()
    assert moved > 100 * ATOL, f"reversing the heads' norm rows moved the logits by only {moved:.3g}"


def test_a_card_named_with_a_hyphen_is_found_by_name_and_a_user_folder_first(
    oracle_files, tmp_path, monkeypatch
):
    """`toycards train command-r`: the stem "command-r" (general.architecture) names the library card,
    and a command-r.card in a TOYCARDS_CARDS folder comes before it, as it does for a file."""
    from toycards.library import CARDS, USER_CARDS_ENV
    from toycards.models.start import start_from_card

    tokenizer = str(oracle_files("command-r").path)  # a GGUF file with a vocabulary
    sets = {"L": 1, "H": 2, "d_e": 16, "d_ff": 16, "ℓ_max": 32, "ε": 1e-5, "m_z": 0.5}
    started = start_from_card("command-r", sets, tokenizer, seed=0)
    assert (started.card.main.name, started.arch) == ("CommandR", "command-r")
    mine = (CARDS / "command-r.card").read_text(encoding="utf-8").replace("← CommandR(", "← MyCommandR(")
    (tmp_path / "command-r.card").write_text(mine, encoding="utf-8")
    monkeypatch.setenv(USER_CARDS_ENV, str(tmp_path))
    started = start_from_card("command-r", sets, tokenizer, seed=0)
    assert (started.card.main.name, started.arch) == ("MyCommandR", "command-r")
