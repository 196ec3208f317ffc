"""The oracle checks itself: HF model → our GGUF → transformers' loader gives the same logits.

If these pass, a GGUF file from `tests/oracle` is one that transformers (and so llama.cpp's
conventions, which transformers' loader inverts) reads back as the model it was written from, and
`OracleFile.expected_logits` is a trustworthy target for toycards' own loader.
"""

from __future__ import annotations

import re

import gguf
import numpy as np
import pytest
import torch
import transformers
from oracle import hf_gguf
from oracle.cases import CASES, NOT_READ_BACK
from oracle.hf_gguf import hf_logits, permute_qk, unpermute_qk
from transformers.core_model_loading import revert_weight_conversion
from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

F32_ATOL = 1e-5
LENGTHS = (1, 7, 64)

# Tolerance for a quantized file against the float model it came from, as a fraction of the
# reference's max |logit|. One stored weight's error: F16 keeps 11 significant bits, ≤ 2^-11
# relative; Q8_0 stores round(w/d) with d = max|block of 32|/127, so |error| ≤ d/2 = max|block|/254,
# ≈ 0.01·σ for Gaussian blocks (max ≈ 2.5σ). From ids to logits there are n_q = 2 + 4·L = 10
# quantized matrices in series (embedding; per layer V, O, up/gate, down; unembedding), and to first
# order their relative errors add: |Δlogit| ≲ n_q · ε · max|logit|. Measured (seed 0): F16 ≤ 8e-4,
# Q8_0 ≤ 1.7e-2 of max|logit|, about 6× inside these bounds.
# The cases whose architecture transformers' GGUF loader reads (granite and smollm3 it does not:
# their files are checked against llama.cpp itself in test_granite_smollm3.py, where it is installed).
READ_BACK = [case for case, (arch, _) in CASES.items() if arch in GGUF_SUPPORTED_ARCHITECTURES]
READ_BACK = [case for case in READ_BACK if case not in NOT_READ_BACK]  # LongRoPE, partial rotary
N_Q = 2 + 4 * 2
QUANT_REL_TOL = {"F16": N_Q * 2.0**-11, "Q8_0": N_Q * 2.5 / 254}
# cases whose files transformers' GGUF loader can read back (gemma v1 and olmo2 it cannot: those are
# checked below against the converter's facts, and against llama.cpp in test_models_oracle.py)
READABLE = [c for c in CASES if hf_gguf.transformers_reads(CASES[c][0]) and c not in NOT_READ_BACK]
# the config field that holds the RMS ε, where it is not `rms_norm_eps` (LFM2Model.set_gguf_parameters
# writes hparams["norm_eps"]; transformers' loader reads it back into the same field)
RMS_EPS_FIELD = {"lfm2": "norm_eps"}


def ids_for(config, length: int) -> list[int]:
    """Token ids covering the whole vocabulary range, fixed per length."""
    return np.random.default_rng(length).integers(0, config.vocab_size, size=length).tolist()


def worst(got: np.ndarray, want: np.ndarray) -> str:
    """Where and how much two logit arrays differ, for failure messages."""
    diff = np.abs(got - want)
    t, v = np.unravel_index(diff.argmax(), diff.shape)
    return (
        f"max |Δ| = {diff.max():.3g} at position {t}, token {v} (got {got[t, v]:.6g}, want {want[t, v]:.6g})"
    )


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("case", READABLE)
def test_f32_file_reloads_to_the_same_logits(oracle_files, case, length):
    f = oracle_files(case, "F32")
    ids = ids_for(f.config, length)
    want, got = hf_logits(f.model, ids), hf_logits(oracle_files.reloaded(case, "F32"), ids)
    assert np.abs(got - want).max() <= F32_ATOL, worst(got, want)
    assert (got.argmax(-1) == want.argmax(-1)).all(), worst(got, want)


@pytest.mark.parametrize("case", READABLE)
def test_reloaded_config_matches(oracle_files, case):
    """transformers rebuilds the config from metadata alone; the fields that matter survive."""
    f = oracle_files(case, "F32")
    got = oracle_files.reloaded(case, "F32").config
    names = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "tie_word_embeddings"]
    if not hasattr(f.config, "num_attention_heads"):  # Mamba: no attention; its state-space sizes instead
        names[3:4] = ["state_size", "conv_kernel", "time_step_rank", "intermediate_size"]
        names += ["layer_norm_epsilon"]
    elif hf_gguf.ARCHS[f.arch].rms_norm:
        names += ["num_key_value_heads", RMS_EPS_FIELD.get(f.config.model_type, "rms_norm_eps")]
        assert hf_gguf.head_dim(got) == hf_gguf.head_dim(f.config)
        assert hf_gguf.rope_theta(got) == pytest.approx(hf_gguf.rope_theta(f.config))
    for name in names:
        assert getattr(got, name) == pytest.approx(getattr(f.config, name)), name


@pytest.mark.parametrize("ftype", ["F16", "Q8_0"])
@pytest.mark.parametrize("case", READABLE)
def test_quantized_file_is_exactly_its_dequantized_twin(oracle_files, case, ftype):
    """transformers reads exactly the blocks we stored: its model equals `quantized_copy`."""
    f = oracle_files(case, ftype)
    ids = ids_for(f.config, 64)
    want, got = f.expected_logits(ids), hf_logits(oracle_files.reloaded(case, ftype), ids)
    assert np.abs(got - want).max() <= F32_ATOL, worst(got, want)


@pytest.mark.parametrize("ftype", ["F16", "Q8_0"])
@pytest.mark.parametrize("case", READABLE)
def test_quantized_file_stays_near_the_float_model(oracle_files, case, ftype, record_property):
    f = oracle_files(case, ftype)
    ids = ids_for(f.config, 64)
    want, got = hf_logits(f.model, ids), hf_logits(oracle_files.reloaded(case, ftype), ids)
    rel = np.abs(got - want).max() / np.abs(want).max()
    record_property("max_rel_delta", float(rel))
    assert rel <= QUANT_REL_TOL[ftype], worst(got, want) + f", {rel:.3g} of max |logit|"


@pytest.mark.parametrize("ftype", ["F32", "F16", "Q8_0"])
@pytest.mark.parametrize("case", ["gpt2", "llama", "llama-tied", "qwen2"])
def test_tensor_types_follow_llama_cpp(oracle_files, case, ftype):
    """Norms, biases, 1-D tensors and position_embd stay F32; other weights take the file type."""
    f = oracle_files(case, ftype)
    reader = gguf.GGUFReader(f.path)
    types = {t.name: gguf.GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}
    want = {"F32": "F32", "F16": "F16", "Q8_0": "Q8_0"}[ftype]
    for name, qtype in types.items():
        keep_f32 = name.endswith(("_norm.weight", ".bias")) or name == "position_embd.weight"
        assert qtype == ("F32" if keep_f32 else want), name
    assert types["token_embd.weight"] == want
    assert ("output.weight" in types) == (not f.config.tie_word_embeddings)
    assert reader.fields["general.file_type"].contents() == int(hf_gguf.FILE_TYPES[ftype][0])


def test_gguf_layout_of_fused_and_grouped_tensors(oracle_files):
    """GGUF NumPy shapes are (n_out, n_in); GPT-2's Conv1D is transposed; rows of attn_qkv are q; k; v."""
    gpt2, llama = oracle_files("gpt2"), oracle_files("llama")
    g = {t.name: t for t in gguf.GGUFReader(gpt2.path).tensors}
    attn = gpt2.model.transformer.h[0].attn
    np.testing.assert_array_equal(g["blk.0.attn_qkv.weight"].data, attn.c_attn.weight.detach().numpy().T)
    assert g["blk.0.ffn_up.weight"].data.shape == (256, 64)  # (4·d_e, d_e)
    l = {t.name: t for t in gguf.GGUFReader(llama.path).tensors}
    assert l["blk.0.attn_k.weight"].data.shape == (32, 64)  # (H_kv·d_h, d_e)
    assert list(l["blk.0.attn_k.weight"].shape) == [64, 32]  # ggml order: ne = [n_in, n_out]
    v = llama.model.model.layers[0].self_attn.v_proj.weight.detach().numpy()
    np.testing.assert_array_equal(l["blk.0.attn_v.weight"].data, v)  # V is never permuted


def test_omitting_the_qk_permutation_is_caught(oracle_files, tmp_path, record_property):
    """A llama file written without llama.cpp's Q/K permutation reloads into a different model."""
    model, config = oracle_files.model("llama")
    bad = hf_gguf.write_gguf(model, config, tmp_path / "unpermuted.gguf", "llama", permute=False)
    ids = ids_for(config, 64)
    want, got = hf_logits(model, ids), hf_gguf.hf_logits_from_gguf(bad, ids)
    delta = np.abs(got - want).max()
    record_property("max_delta_unpermuted", float(delta))
    assert delta > 0.1 * np.abs(want).max(), worst(got, want)
    assert np.abs(got[0] - want[0]).max() <= F32_ATOL  # position 0 has no rotation: only RoPE differs


def _rope_adjacent_pairs(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """ggml's rope mode NORM on one head: rotate (x[2i], x[2i+1]) by pos · base^(-2i/d_h)."""
    theta = pos * base ** (-np.arange(0, x.shape[-1], 2) / x.shape[-1])
    c, s, a, b = np.cos(theta), np.sin(theta), x[0::2], x[1::2]
    out = np.empty_like(x)
    out[0::2], out[1::2] = a * c - b * s, a * s + b * c
    return out


def test_permutation_turns_hf_halves_rope_into_adjacent_pairs(oracle_files):
    """rope_adjacent(permute(q)) == permute(HF's rope(q)): the direction of llama.cpp's permutation."""
    model, config = oracle_files.model("llama")
    d_h, pos = config.head_dim, 5
    q = np.random.default_rng(0).standard_normal((1, 1, 1, d_h)).astype(np.float32)
    cos, sin = model.model.rotary_emb(torch.from_numpy(q), torch.tensor([[pos]]))
    hf_rot, _ = transformers.models.llama.modeling_llama.apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(q), cos, sin
    )
    ours = _rope_adjacent_pairs(permute_qk(q[0, 0, 0], 1), pos, hf_gguf.rope_theta(config))
    np.testing.assert_allclose(ours, permute_qk(hf_rot[0, 0, 0].numpy(), 1), atol=1e-5)


def test_permute_and_unpermute_are_inverse():
    w = np.arange(2 * 8 * 3).reshape(16, 3)  # H = 2 heads of d_h = 8 rows
    assert permute_qk(w, 2)[:8, 0].tolist() == [0, 12, 3, 15, 6, 18, 9, 21]  # rows 0 4 1 5 2 6 3 7
    np.testing.assert_array_equal(unpermute_qk(permute_qk(w, 2), 2), w)


@pytest.mark.parametrize("case", ["gpt2", "llama", "qwen2"])
def test_tokenizer_metadata_loads_in_transformers(oracle_files, case):
    f = oracle_files(case)
    tok = transformers.AutoTokenizer.from_pretrained(f.path.parent, gguf_file=f.path.name)
    text = "the cat sat on the mat"
    assert len(tok) == f.config.vocab_size
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True).strip() == text


def test_extra_kv_adds_replaces_and_removes_keys(oracle_files, tmp_path):
    model, config = oracle_files.model("llama")
    extra = {"llama.rope.freq_base": 123.0, "llama.attention.layer_norm_rms_epsilon": None, "x.flag": True}
    path = hf_gguf.write_gguf(model, config, tmp_path / "kv.gguf", "llama", extra_kv=extra)
    fields = gguf.GGUFReader(path).fields
    assert fields["llama.rope.freq_base"].contents() == 123.0
    assert "llama.attention.layer_norm_rms_epsilon" not in fields
    assert fields["x.flag"].contents() is True
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.attention.head_count_kv"].contents() == 2


# ── files transformers cannot read back: the converter's facts, one by one ────────────────
# (granite and smollm3 permute Q/K as LlamaModel does: llama.cpp checks those, test_granite_smollm3.py;
# the architectures in _QK_PERMUTED_HERE permute them too, and _STORED_AS re-derives that permutation)
_QK_PERMUTED_HERE = {gguf.MODEL_ARCH.NEMOTRON_H}
UNREADABLE = [
    c
    for c, (arch, _) in CASES.items()
    if c not in READABLE
    and (not hf_gguf.ARCHS[arch].permute_qk or hf_gguf.ARCHS[arch].gguf_arch in _QK_PERMUTED_HERE)
]


@pytest.mark.parametrize("case", UNREADABLE)
def test_unreadable_file_is_what_the_converter_writes(oracle_files, case):
    """Names from gguf's own map and inside gguf.MODEL_TENSORS, values as stored (norms plus the
    converter's shift, nothing permuted, the converter's own reshapes and splits), and the metadata
    keys it leaves out absent."""
    f = oracle_files(case)
    spec = hf_gguf.ARCHS[f.arch]
    reader = gguf.GGUFReader(f.path)
    stored = {t.name: np.array(t.data) for t in reader.tensors}
    allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[spec.gguf_arch]}
    if f.config.tie_word_embeddings:  # a tied checkpoint has no lm_head: no output.weight
        assert "output.weight" not in stored
    expected = _qkv_as_written(_converted(f.model, f.config, spec), spec.qkv, f.config)
    for name, want in expected.items():
        assert _template(name, suffix=False) in allowed, name
        np.testing.assert_array_equal(stored.pop(name), want, err_msg=name)
    for name, want in (spec.extra_tensors(f.config) if spec.extra_tensors else {}).items():  # LongRoPE's
        assert name.rsplit(".", 1)[0] in allowed, name
        np.testing.assert_array_equal(stored.pop(name), want, err_msg=name)
    assert not stored, f"tensors from nowhere: {sorted(stored)}"
    arch = gguf.MODEL_ARCH_NAMES[spec.gguf_arch]  # general.architecture (olmo3's files are olmo2)
    for key in spec.absent_keys:
        assert key.format(arch=arch) not in reader.fields, key


_A, _T = gguf.MODEL_ARCH, gguf.MODEL_TENSOR

# Names the converter rewrites before gguf's map reads them: (arch, or None for every converter,
# pattern, replacement).
_RENAMED = (
    # ModelBase.filter_tensors: DeepSeek V3's and GLM-4.5's router bias, which the map knows as a bias
    (None, r"\.e_score_correction_bias$", ".e_score_correction.bias"),
    (_A.MAMBA2, r"\.dt_bias$", ".dt_proj.bias"),  # Mamba2Model.modify_tensors: ssm_dt.bias
    (_A.FALCON_H1, r"\.dt_bias$", ".dt_proj.bias"),  # FalconH1Model via Mamba2Model.modify_tensors
    (_A.QWEN3NEXT, r"\.dt_bias$", ".dt_proj.bias"),  # Qwen3NextModel.modify_tensors: ssm_dt.bias
    (_A.NEMOTRON_H, r"\.dt_bias$", ".dt_proj.bias"),  # NemotronHModel via Mamba2Model.filter_tensors
    (_A.GPT_OSS, r"\.sinks$", ".sinks.weight"),  # GptOssModel.filter_tensors: attn_sinks.weight
    # GptOssModel.modify_tensors and Llama4Model.modify_tensors: the experts' down_proj [E, d_ff, d_e]
    # (swapped in _STORED_AS) and gpt-oss's bias beside it [E, d_e]
    (_A.GPT_OSS, r"\.experts\.down_proj$", ".experts.down_proj.weight"),
    (_A.GPT_OSS, r"\.experts\.down_proj_bias$", ".experts.down_proj.bias"),
    (_A.LLAMA4, r"\.experts\.down_proj$", ".experts.down_proj.weight"),
)

# Tensors the converter stacks, one per index, into one with the index first: (pattern, stacked name).
# A layer's routed experts: Qwen2MoeModel, OlmoeModel, Glm4MoeModel and DeepseekV2Model stack them into
# `mlp.experts.{w}.weight` [E, n_out, n_in]; StableLM 2 12B's per-head q/k LayerNorms:
# StableLMModel._stack_qk_norm stacks them into `self_attn.{q,k}_layernorm.weight` [heads, d_h].
_STACKED = (
    # (JambaModel stacks `feed_forward.experts`, the others `mlp.experts`)
    (
        re.compile(r"(?P<at>.*\.(?:mlp|feed_forward)\.experts)\.(?P<i>\d+)\.(?P<w>\w+)\.weight"),
        "{at}.{w}.weight",
    ),
    (re.compile(r"(?P<at>.*_layernorm)\.norms\.(?P<i>\d+)\.weight"), "{at}.weight"),
)


def _mla_kv_b(name: str, w: np.ndarray, config) -> list[tuple[str, np.ndarray]]:
    """DeepseekV2Model.modify_tensors: `kv_b_proj` [H_kv·(d_n + d_v), d_c] viewed per head
    [H_kv, d_n + d_v, d_c] and split at d_n: `k_b_proj` with each head transposed [H_kv, d_c, d_n],
    `v_b_proj` [H_kv, d_v, d_c]. (H_kv is the config's, read before set_gguf_parameters sets it to 1.)"""
    d_n, d_v = config.qk_nope_head_dim, config.v_head_dim
    kv_b = w.reshape(config.num_key_value_heads, d_n + d_v, w.shape[-1])  # (H_kv, d_n + d_v, d_c)
    k_b = kv_b[:, :d_n, :].swapaxes(1, 2)  # (H_kv, d_c, d_n)
    v_b = kv_b[:, d_n:, :]  # (H_kv, d_v, d_c)
    return [(name.replace("kv_b_proj", "k_b_proj"), k_b), (name.replace("kv_b_proj", "v_b_proj"), v_b)]


def _gate_up_interleaved(name: str, w: np.ndarray, config) -> list[tuple[str, np.ndarray]]:
    """GptOssModel.modify_tensors: the experts' `gate_up_proj` [E, d_e, 2·d_ff] swapped to [E, 2·d_ff, d_e],
    whose even rows are `gate_proj` and odd rows `up_proj`; `gate_up_proj_bias` [E, 2·d_ff] split the same
    way.

    >>> [(n, p.tolist()) for n, p in _gate_up_interleaved("x.gate_up_proj_bias", np.arange(6)[None], None)]
    [('x.gate_proj.bias', [[0, 2, 4]]), ('x.up_proj.bias', [[1, 3, 5]])]
    """
    if name.endswith("_bias"):
        stem = name.removesuffix("gate_up_proj_bias")
        return [(stem + "gate_proj.bias", w[..., ::2]), (stem + "up_proj.bias", w[..., 1::2])]  # (E, d_ff)
    gate_up = w.swapaxes(-1, -2)  # (E, 2·d_ff, d_e)
    stem = name.removesuffix("gate_up_proj")
    return [(stem + "gate_proj.weight", gate_up[:, ::2]), (stem + "up_proj.weight", gate_up[:, 1::2])]


def _gate_up_halves(name: str, w: np.ndarray, config) -> list[tuple[str, np.ndarray]]:
    """Llama4Model.modify_tensors: the experts' `gate_up_proj` [E, d_e, 2·d_ff] swapped to [E, 2·d_ff, d_e]
    and cut in two: the first d_ff rows `gate_proj`, the rest `up_proj`."""
    gate_up = w.swapaxes(-1, -2)  # (E, 2·d_ff, d_e)
    d_ff = gate_up.shape[1] // 2
    stem = name.removesuffix("gate_up_proj")
    return [(stem + "gate_proj.weight", gate_up[:, :d_ff]), (stem + "up_proj.weight", gate_up[:, d_ff:])]


def _qkvz(name: str, w: np.ndarray, config) -> list[tuple[str, np.ndarray]]:
    """Qwen3NextModel.modify_tensors: `in_proj_qkvz` holds, per key head, its q (d_k rows), k (d_k), v and z
    ((H_v / H_k)·d_v each); the converter writes every head's q, then k, then v as `attn_qkv` and the z rows
    as `attn_gate`, named by format_tensor_name (GGUF names, which gguf's map passes through)."""
    d_k, d_v = config.linear_key_head_dim, config.linear_value_head_dim
    H_k, H_v = config.linear_num_key_heads, config.linear_num_value_heads
    d_e = w.shape[-1]
    per_head = w.reshape(H_k, -1, d_e)  # (H_k, 2·d_k + 2·(H_v/H_k)·d_v, d_e)
    q, k, v, z = np.split(per_head, np.cumsum([d_k, d_k, H_v // H_k * d_v]), axis=1)
    bid = int(re.search(r"\.layers\.(\d+)\.", name)[1])
    qkv = np.concatenate([x.reshape(-1, d_e) for x in (q, k, v)])  # (H_k·2·d_k + H_v·d_v, d_e)
    return [
        (gguf.TENSOR_NAMES[_T.ATTN_QKV].format(bid=bid) + ".weight", qkv),
        (gguf.TENSOR_NAMES[_T.ATTN_GATE].format(bid=bid) + ".weight", z.reshape(-1, d_e)),  # (H_v·d_v, d_e)
    ]


# A checkpoint tensor the converter writes as several: (arch, name suffix) → its parts.
_SPLIT = {
    (_A.DEEPSEEK2, ".self_attn.kv_b_proj.weight"): _mla_kv_b,
    (_A.GPT_OSS, ".mlp.experts.gate_up_proj"): _gate_up_interleaved,
    (_A.GPT_OSS, ".mlp.experts.gate_up_proj_bias"): _gate_up_interleaved,
    (_A.LLAMA4, ".feed_forward.experts.gate_up_proj"): _gate_up_halves,
    (_A.QWEN3NEXT, ".linear_attn.in_proj_qkvz.weight"): _qkvz,
}


def _times(w: np.ndarray, *factors: float) -> np.ndarray:
    """`w` multiplied by each factor in turn, in float32 as the converter's torch tensors are."""
    t = torch.as_tensor(w)
    for f in factors:
        t = t * f
    return t.numpy()


def _falcon_h1_ssm_in(w: np.ndarray, c) -> np.ndarray:
    """FalconH1Model.modify_tensors: ssm_in × ssm_in_multiplier, then each row group × its ssm_multipliers
    entry: z and x (d_ssm rows each), B and C (n_groups·d_state each), dt (the rest, one per head)."""
    t = torch.as_tensor(_times(w, c.ssm_in_multiplier))  # (2·d_ssm + 2·n_groups·d_state + H, d_e)
    d_ssm, gn = c.mamba_d_ssm, c.mamba_n_groups * c.mamba_d_state
    ends = (d_ssm, 2 * d_ssm, 2 * d_ssm + gn, 2 * d_ssm + 2 * gn, t.shape[0])
    for start, end, m in zip((0, *ends[:-1]), ends, c.ssm_multipliers, strict=True):
        t[start:end] *= m
    return t.numpy()


def _weight(t: gguf.MODEL_TENSOR) -> str:
    """gguf's name of `t`'s weight, "blk.{bid}" left in: _weight(_T.ATTN_Q) == "blk.{bid}.attn_q.weight"."""
    return gguf.TENSOR_NAMES[t] + ".weight"


# Mamba2Model.modify_tensors squeezes the convolution [d_xBC, 1, d_conv] to [d_xBC, d_conv], gives A and D a
# trailing axis ([H] → [H, 1]) and stores A as −exp(A_log); FalconH1Model.modify_tensors runs it first
_MAMBA2_VALUES = {
    _weight(_T.SSM_CONV1D): lambda w, c: w.squeeze(),
    gguf.TENSOR_NAMES[_T.SSM_A]: lambda w, c: -torch.exp(torch.as_tensor(w)[:, None]).numpy(),
    gguf.TENSOR_NAMES[_T.SSM_D]: lambda w, c: w[:, None],
}


def _llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """LlamaModel.permute: each of `n_head` heads' rows, read as halves [x… | y…], interleaved x0 y0 x1 y1 ….

    >>> _llama_permute(np.arange(8), 2).tolist()
    [0, 2, 1, 3, 4, 6, 5, 7]
    """
    t = torch.as_tensor(w)
    halves = t.reshape(n_head, 2, t.shape[0] // n_head // 2, *t.shape[1:])  # (heads, 2, d_h/2, …)
    return halves.swapaxes(1, 2).reshape(t.shape).numpy()


# NemotronHModel.modify_tensors: the Mamba-2 blocks through Mamba2Model.modify_tensors (its reshapes, the
# gated norm's scales to [n_groups, d_inner / n_groups]), the attention blocks through LlamaModel's, whose
# undo_permute (GraniteHybridModel's) permutes q_proj over num_attention_heads, k_proj over num_key_value_heads
_NEMOTRON_H_VALUES = {
    _weight(_T.SSM_NORM): lambda w, c: w.reshape(c.n_groups, -1),
    _weight(_T.ATTN_Q): lambda w, c: _llama_permute(w, c.num_attention_heads),
    _weight(_T.ATTN_K): lambda w, c: _llama_permute(w, c.num_key_value_heads),
}

# FalconH1Model.modify_tensors folds the µP multipliers into the weights they follow
_FALCON_H1_VALUES = {
    _weight(_T.TOKEN_EMBD): lambda w, c: _times(w, c.embedding_multiplier),
    _weight(_T.OUTPUT): lambda w, c: _times(w, c.lm_head_multiplier),
    _weight(_T.ATTN_Q): lambda w, c: _times(w, c.attention_in_multiplier),
    _weight(_T.ATTN_K): lambda w, c: _times(w, c.key_multiplier, c.attention_in_multiplier),
    _weight(_T.ATTN_V): lambda w, c: _times(w, c.attention_in_multiplier),
    _weight(_T.ATTN_OUT): lambda w, c: _times(w, c.attention_out_multiplier),
    _weight(_T.FFN_GATE): lambda w, c: _times(w, c.mlp_multipliers[0]),
    _weight(_T.FFN_DOWN): lambda w, c: _times(w, c.mlp_multipliers[1]),
    _weight(_T.SSM_IN): _falcon_h1_ssm_in,
    _weight(_T.SSM_OUT): lambda w, c: _times(w, c.ssm_out_multiplier),
}

# What modify_tensors does to the values of a tensor once named, by (arch, GGUF name with "blk.{bid}").
_STORED_AS = {
    **{(_A.MAMBA2, name): rule for name, rule in _MAMBA2_VALUES.items()},
    # Mamba2Model.modify_tensors: the gated norm's scales reshaped to [n_groups, d_inner / n_groups]
    (_A.MAMBA2, _weight(_T.SSM_NORM)): lambda w, c: w.reshape(c.n_groups, -1),
    # JambaModel.modify_tensors, as MambaModel's: A = −exp(A_log) [d_inner, d_state], the conv squeezed
    (_A.JAMBA, _weight(_T.SSM_CONV1D)): lambda w, c: w.squeeze(),
    (_A.JAMBA, gguf.TENSOR_NAMES[_T.SSM_A]): lambda w, c: -torch.exp(torch.as_tensor(w)).numpy(),
    **{(_A.FALCON_H1, name): rule for name, rule in (_MAMBA2_VALUES | _FALCON_H1_VALUES).items()},
    **{(_A.NEMOTRON_H, name): rule for name, rule in (_MAMBA2_VALUES | _NEMOTRON_H_VALUES).items()},
    # Qwen3NextModel.modify_tensors: A = −exp(A_log) [H_v] (no trailing axis), the conv squeezed
    (_A.QWEN3NEXT, _weight(_T.SSM_CONV1D)): lambda w, c: w.squeeze(),
    (_A.QWEN3NEXT, gguf.TENSOR_NAMES[_T.SSM_A]): lambda w, c: -torch.exp(torch.as_tensor(w)).numpy(),
    # GptOssModel.modify_tensors, Llama4Model.modify_tensors: the experts' down_proj swapped to [E, d_e, d_ff]
    (_A.GPT_OSS, _weight(_T.FFN_DOWN_EXP)): lambda w, c: w.swapaxes(-1, -2),
    (_A.LLAMA4, _weight(_T.FFN_DOWN_EXP)): lambda w, c: w.swapaxes(-1, -2),
}

# The converters that store a norm's scales as 1 + w (the model scales by 1 + w), by arch: the ends of the
# `*norm.weight` names they leave as they are. GemmaModel, Gemma2Model, Gemma3Model.modify_tensors: every
# `norm.weight` + 1; Qwen3NextModel.modify_tensors: all but its gated norm's, `linear_attn.norm.weight`.
_NORM_PLUS_ONE = {_A.GEMMA: (), _A.GEMMA2: (), _A.GEMMA3: (), _A.QWEN3NEXT: ("linear_attn.norm.weight",)}


def _template(name: str, suffix: bool = True) -> str:
    """A GGUF tensor name with its block number as gguf's tables write it, with or without its suffix.

    >>> _template("blk.3.ssm_conv1d.weight"), _template("blk.3.ssm_a"), _template("output.weight", suffix=False)
    ('blk.{bid}.ssm_conv1d.weight', 'blk.{bid}.ssm_a', 'output')
    """
    name = name if suffix else re.sub(r"\.(weight|bias)$", "", name)
    return re.sub(r"^blk\.\d+\.", "blk.{bid}.", name)


def _checkpoint(model: torch.nn.Module, arch: gguf.MODEL_ARCH) -> dict[str, np.ndarray]:
    """The tensors convert_hf_to_gguf.py reads, under the names it hands to gguf's map: the state dict
    as `save_pretrained` writes it (transformers 5 renames, fuses and splits some parameters on load,
    NomicBert's Wqkv, fc11, fc12 and norm1/2, a layer's experts; revert_weight_conversion undoes that),
    then the converter's own renames (_RENAMED)."""
    state = revert_weight_conversion(model, dict(model.state_dict()))
    out = {}
    for name, w in state.items():
        for only, pattern, replacement in _RENAMED:
            name = re.sub(pattern, replacement, name) if only in (None, arch) else name
        out[name] = w.detach().numpy()
    return out


def _stacked(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`tensors` with each group of _STACKED replaced by its stack, index 0 first."""
    out, groups = {}, {}
    for name, w in tensors.items():
        for pattern, stacked in _STACKED:
            if (m := pattern.fullmatch(name)) is not None:
                groups.setdefault(stacked.format(**m.groupdict()), {})[int(m["i"])] = w
                break
        else:
            out[name] = w
    return out | {name: np.stack([parts[i] for i in sorted(parts)]) for name, parts in groups.items()}


# ApertusModel.modify_tensors writes no tensor for each block's xIELU numbers: set_gguf_parameters puts
# them into the per-block metadata arrays xielu.alpha_p, xielu.alpha_n, xielu.beta and xielu.eps
_AS_METADATA = {
    gguf.MODEL_ARCH.APERTUS: re.compile(r"model\.layers\.(\d+)\.mlp\.act_fn\.(alpha_p|alpha_n|beta|eps)")
}


def _metadata_arrays(model: torch.nn.Module, arch: gguf.MODEL_ARCH) -> dict[str, list[float]]:
    """The metadata arrays the converter makes of checkpoint numbers (_AS_METADATA): key → per block."""
    pattern, out = _AS_METADATA.get(arch), {}
    for name, w in _checkpoint(model, arch).items() if pattern is not None else ():
        if (m := pattern.fullmatch(name)) is not None:
            out.setdefault(f"xielu.{m.group(2)}", {})[int(m.group(1))] = float(np.asarray(w).reshape(-1)[0])
    return {key: [v[i] for i in sorted(v)] for key, v in out.items()}


def _converted(model: torch.nn.Module, config, spec) -> dict[str, np.ndarray]:
    """What the converter writes for `model`'s checkpoint, by GGUF name: each tensor renamed, stacked
    or split as its converter class does, named through gguf's map with `.weight` / `.bias` kept, its
    values as modify_tensors stores them (_STORED_AS, and _NORM_PLUS_ONE's + 1)."""
    name_map = gguf.get_tensor_name_map(spec.gguf_arch, config.num_hidden_layers)
    unshifted = _NORM_PLUS_ONE.get(spec.gguf_arch)
    out = {}
    for hf_name, w in _stacked(_checkpoint(model, spec.gguf_arch)).items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # a tied checkpoint has no lm_head
        if spec.dropped and hf_name.startswith(spec.dropped):  # BERT's pooler: not converted
            continue
        if spec.gguf_arch in _AS_METADATA and _AS_METADATA[spec.gguf_arch].fullmatch(hf_name):
            continue  # a metadata array's entry (test_metadata_arrays_hold_the_checkpoints_numbers)
        for part, v in _split(spec.gguf_arch, hf_name, w, config):
            name = name_map.get_name(part, try_suffixes=(".weight", ".bias"))
            assert name is not None, f"gguf's {spec.gguf_arch.name} map has no name for {part!r}"
            v = _STORED_AS.get((spec.gguf_arch, _template(name)), lambda w, c: w)(v, config)
            shifted = unshifted is not None and part.endswith("norm.weight") and not part.endswith(unshifted)
            out[name] = v + np.float32(1) if shifted else v
    return out


def _split(arch: gguf.MODEL_ARCH, hf_name: str, w: np.ndarray, config) -> list[tuple[str, np.ndarray]]:
    """The parts the converter makes of one checkpoint tensor (_SPLIT), or the tensor itself."""
    for (only, end), parts in _SPLIT.items():
        if only == arch and hf_name.endswith(end):
            return parts(hf_name, w, config)
    return [(hf_name, w)]


def _qkv_as_written(tensors: dict[str, np.ndarray], layout: str, config) -> dict[str, np.ndarray]:
    """The oracle's other q/k/v layout of a file: "fused" puts a block's attn_q, attn_k, attn_v rows
    into one attn_qkv (q first), "split" takes attn_qkv apart at H·d_h and (H + H_kv)·d_h."""
    if not layout:
        return tensors
    d_h = config.hidden_size // config.num_attention_heads
    q, kv = config.num_attention_heads * d_h, config.num_key_value_heads * d_h
    out = {}
    for name, w in tensors.items():
        m = re.fullmatch(r"(blk\.\d+)\.attn_(q|k|v|qkv)\.(weight|bias)", name)
        if m is None:
            out[name] = w
        elif layout == "fused" and m.group(2) == "q":
            parts = [tensors[f"{m.group(1)}.attn_{x}.{m.group(3)}"] for x in "qkv"]
            out[f"{m.group(1)}.attn_qkv.{m.group(3)}"] = np.concatenate(parts)
        elif layout == "split" and m.group(2) == "qkv":
            for x, part in zip("qkv", (w[:q], w[q : q + kv], w[q + kv :]), strict=True):
                out[f"{m.group(1)}.attn_{x}.{m.group(3)}"] = part
        elif m.group(2) == "qkv" or layout != "fused":
            out[name] = w
    return out


@pytest.mark.parametrize("case", [c for c in CASES if hf_gguf.ARCHS[CASES[c][0]].gguf_arch in _AS_METADATA])
def test_metadata_arrays_hold_the_checkpoints_numbers(oracle_files, case):
    """Apertus's xIELU numbers, one per block, are in the file's xielu.* arrays as the checkpoint holds them."""
    f = oracle_files(case)
    want = _metadata_arrays(f.model, hf_gguf.ARCHS[f.arch].gguf_arch)
    reader = gguf.GGUFReader(f.path)
    assert want and all(len(v) == f.config.num_hidden_layers for v in want.values())
    for key, values in want.items():
        np.testing.assert_array_equal(
            np.float32(reader.fields[key].contents()), np.float32(values), err_msg=key
        )
