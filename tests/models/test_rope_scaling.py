"""RoPE scaling in the Llama card: linear scaling and Llama 3 frequency factors (`rope_freqs`).

transformers ignores both when it loads a GGUF, so the oracle here is a NumPy Llama forward pass
written below from the formulas (float64, Hugging Face layout: unpermuted Q/K, rotation of halves),
with the scaled inverse frequencies computed by hand:

- linear (`llama.rope.scaling.type = "linear"`, factor s): every inverse frequency θ^(−2i/d_h) / s;
- Llama 3 (`rope_freqs.weight`, written by llama.cpp's converter, no metadata keys): with
  wavelength λ_i = 2π / f_i, f_i = θ^(−2i/d_h), and the config's factor, low/high frequency factors
  and original context length n: λ < n/high keeps f, λ > n/low divides f by factor, in between f is
  blended, f · ((1 − a)/factor + a) with a = (n/λ − low)/(high − low). The file stores the
  per-frequency *divisors* (1, factor, 1/((1 − a)/factor + a)) the way the converter computes them;
  the reference computes the scaled frequencies directly, the way transformers' `llama3` rope does.

The reference is first checked against transformers itself (a model built in memory with the same
`rope_parameters`), so that it is trusted where transformers' GGUF loader cannot follow.
θ = 100 puts the 8 frequencies of d_h = 16 at wavelengths 6…353 tokens, so with n = 128 every
regime occurs and 64 positions rotate every pair noticeably.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers
from oracle.hf_gguf import ARCHS, gguf_tensors, tiny_model, write_gguf
from test_models_oracle import assert_logits_close, worst
from test_save_peer import _llama_cpp_python

from toycards.models.load import load

THETA = 100.0
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=128)
LINEAR = 4.0
IDS = np.random.default_rng(7).integers(0, 128, size=64).tolist()


def inverse_frequencies(d_h: int, theta: float) -> np.ndarray:
    """f_i = θ^(−2i/d_h), i = 0 … d_h/2 − 1."""
    return theta ** -(np.arange(0, d_h, 2, dtype=np.float64) / d_h)


def llama3_divisors(
    d_h: int, theta: float, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
):
    """What llama.cpp's converter writes as `rope_freqs.weight`: one divisor per frequency."""
    n = original_max_position_embeddings
    out = []
    for f in inverse_frequencies(d_h, theta):
        wavelength = 2 * math.pi / f
        if wavelength < n / high_freq_factor:
            out.append(1.0)
        elif wavelength > n / low_freq_factor:
            out.append(factor)
        else:
            a = (n / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - a) / factor + a))
    return np.array(out, dtype=np.float32)


def llama3_frequencies(
    d_h: int, theta: float, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
):
    """The scaled inverse frequencies themselves (transformers' form of the same formula)."""
    n = original_max_position_embeddings
    f = inverse_frequencies(d_h, theta)
    wavelength = 2 * np.pi / f
    a = (n / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = f * ((1 - a) / factor + a)
    return np.where(
        wavelength < n / high_freq_factor, f, np.where(wavelength > n / low_freq_factor, f / factor, blended)
    )


# ── the reference forward pass ─────────────────────────────────────────────────────────────
def _rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rotate(x, positions, inv_freq, mscale=1.0):
    """HF rotation of halves on x [H, T, d_h]: pair (i, i + d_h/2) turns by position · f_i; cos and
    sin carry the magnitude `mscale` (transformers' attention_scaling)."""
    angle = positions[:, None] * inv_freq[None, :]  # [T, d_h/2]
    cos, sin = mscale * np.cos(angle), mscale * np.sin(angle)
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def llama_reference(
    state: dict[str, np.ndarray], config, ids: list[int], inv_freq: np.ndarray, mscale: float = 1.0
) -> np.ndarray:
    """Logits [T, N_V] of a Hugging Face Llama state dict, in float64."""
    w = {k: v.astype(np.float64) for k, v in state.items()}
    H, H_kv, eps = config.num_attention_heads, config.num_key_value_heads, config.rms_norm_eps
    T, d_h = len(ids), config.hidden_size // H
    x = w["model.embed_tokens.weight"][ids]  # [T, d_e]
    positions = np.arange(T, dtype=np.float64)
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, d_h).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, H_kv, d_h).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, H_kv, d_h).transpose(1, 0, 2)
        q, k = _rotate(q, positions, inv_freq, mscale), _rotate(k, positions, inv_freq, mscale)
        group = np.arange(H) // (H // H_kv)  # query head → its key/value head
        scores = q @ k[group].transpose(0, 2, 1) / np.sqrt(d_h)  # [H, T, T]
        scores = np.where(causal, scores, -np.inf)
        attn = np.exp(scores - scores.max(-1, keepdims=True))
        attn /= attn.sum(-1, keepdims=True)
        y = (attn @ v[group]).transpose(1, 0, 2).reshape(T, H * d_h)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = _rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].T


# ── fixtures: one tiny model, files with each kind of scaling ──────────────────────────────
@pytest.fixture(scope="module")
def tiny():
    model, config = tiny_model("llama", seed=3)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return model, config, state


def write_llama(
    path, model, config, scaling: str | None = None, factor: float = 1.0, rope_freqs=None, extra=None
):
    """The tiny model as a llama GGUF (llama.cpp names and Q/K permutation), θ = THETA; `extra`:
    more float32 keys by name template ({arch} for "llama"), e.g. the original context length."""
    K, A, R = gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope
    w = gguf.GGUFWriter(str(path), "llama")
    u32 = {
        K.BLOCK_COUNT: config.num_hidden_layers, K.CONTEXT_LENGTH: config.max_position_embeddings,
        K.EMBEDDING_LENGTH: config.hidden_size, K.FEED_FORWARD_LENGTH: config.intermediate_size,
        A.HEAD_COUNT: config.num_attention_heads, A.HEAD_COUNT_KV: config.num_key_value_heads,
    }  # fmt: skip
    for key, value in u32.items():
        w.add_uint32(key.format(arch="llama"), value)
    w.add_float32(A.LAYERNORM_RMS_EPS.format(arch="llama"), config.rms_norm_eps)
    w.add_float32(R.FREQ_BASE.format(arch="llama"), THETA)
    if scaling is not None:
        w.add_string(R.SCALING_TYPE.format(arch="llama"), scaling)
        w.add_float32(R.SCALING_FACTOR.format(arch="llama"), factor)
    for key, value in (extra or {}).items():
        w.add_key_value(key.format(arch="llama"), *value)
    tensors = gguf_tensors(model, config, "llama")
    if rope_freqs is not None:
        tensors[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"] = rope_freqs
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_with_rope(model, config, rope_parameters: dict) -> np.ndarray:
    """transformers' own logits for the tiny model's weights under `rope_parameters` (in memory)."""
    kwargs = {k: getattr(config, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
              "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
              "max_position_embeddings", "tie_word_embeddings")}  # fmt: skip
    twin = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**kwargs, rope_parameters={"rope_theta": THETA, **rope_parameters})
    ).eval()
    twin.load_state_dict(model.state_dict())
    with torch.no_grad():
        return twin(torch.tensor([IDS]), use_cache=False).logits[0].double().numpy()


D_H = 16
SCALINGS = {  # name → (GGUF scaling type, factor, rope_freqs, reference frequencies, HF rope_parameters)
    "none": (None, 1.0, None, inverse_frequencies(D_H, THETA), {"rope_type": "default"}),
    "linear": ("linear", LINEAR, None, inverse_frequencies(D_H, THETA) / LINEAR,
               {"rope_type": "linear", "factor": LINEAR}),
    "llama3": (None, 1.0, llama3_divisors(D_H, THETA, **LLAMA3), llama3_frequencies(D_H, THETA, **LLAMA3),
               {"rope_type": "llama3", **LLAMA3}),
    "llama3+linear": ("linear", LINEAR, llama3_divisors(D_H, THETA, **LLAMA3),
                      llama3_frequencies(D_H, THETA, **LLAMA3) / LINEAR, None),
    # llama.cpp's llama has no long/short factors: longrope divides by s like linear (freq_scale = 1/s)
    "longrope": ("longrope", LINEAR, None, inverse_frequencies(D_H, THETA) / LINEAR, None),
}  # fmt: skip


def test_the_llama3_setup_covers_every_regime(tiny):
    _, config, _ = tiny
    assert config.hidden_size // config.num_attention_heads == D_H
    divisors = llama3_divisors(D_H, THETA, **LLAMA3)
    assert (divisors == 1).sum() >= 2 and (divisors == LLAMA3["factor"]).sum() >= 2
    assert ((divisors > 1) & (divisors < LLAMA3["factor"])).sum() >= 2, divisors
    np.testing.assert_allclose(
        inverse_frequencies(D_H, THETA) / divisors, llama3_frequencies(D_H, THETA, **LLAMA3), rtol=1e-6
    )


@pytest.mark.parametrize("name", [n for n, s in SCALINGS.items() if s[4] is not None])
def test_reference_agrees_with_transformers(tiny, name):
    model, config, state = tiny
    _, _, _, inv_freq, rope_parameters = SCALINGS[name]
    want = hf_with_rope(model, config, rope_parameters)
    got = llama_reference(state, config, IDS, inv_freq)
    assert np.abs(got - want).max() < 1e-4, worst(got, want)


@pytest.mark.parametrize("target", ["numpy", "torch"])
@pytest.mark.parametrize("name", list(SCALINGS))
def test_scaled_rope_matches_the_reference(tiny, tmp_path_factory, name, target):
    model, config, state = tiny
    scaling, factor, rope_freqs, inv_freq, _ = SCALINGS[name]
    path = write_llama(
        tmp_path_factory.mktemp("rope") / f"{name}.gguf", model, config, scaling, factor, rope_freqs
    )
    got = load(path, target=target).logits(IDS)
    want = llama_reference(state, config, IDS, inv_freq)
    assert_logits_close(got, want, what=f"rope {name}, {target}")
    if name != "none":  # the scaling must matter: far from the unscaled reference
        unscaled = llama_reference(state, config, IDS, inverse_frequencies(D_H, THETA))
        assert np.abs(want - unscaled).max() > 0.05, worst(want, unscaled)


# ── YaRN: llama.cpp's rope_yarn as the prelude's yarn_divisors and a magnitude m ────────────
# The oracle is transformers' `ROPE_INIT_FUNCTIONS["yarn"]` (inverse frequencies and attention
# factor) and a transformers Llama built with the same `rope_parameters`. The two agree with
# llama.cpp when factor = max_position_embeddings / original_max_position_embeddings (transformers
# derives its attention factor from that ratio when no factor is given) and no beta or attention
# factor is configured (llama.cpp's llama reads no rope.scaling.yarn_* key). llama.cpp's own rule
# for the magnitude, m = rope.scaling.attn_factor · (1 + 0.1 ln s), is checked by hand below.
YARN = dict(factor=4.0, original_max_position_embeddings=32)  # 64 positions: twice the original context
YARN_CONFIGS = [  # (d_h, θ, factor, original context): every pair kept, ramped or divided somewhere
    (16, THETA, 4.0, 32),
    (64, 10000.0, 8.0, 4096),
    (128, 1e6, 4.0, 32768),
]


def yarn_reference(d_h: int, theta: float, factor: float, original: int) -> tuple[np.ndarray, float]:
    """transformers' YaRN inverse frequencies and attention factor for one head size."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=2 * d_h, num_attention_heads=2, max_position_embeddings=int(factor * original),
        rope_parameters={"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                         "original_max_position_embeddings": original},
    )  # fmt: skip
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return inv_freq.double().numpy(), float(attention_factor)


@pytest.mark.parametrize("d_h, theta, factor, original", YARN_CONFIGS)
def test_yarn_divisors_match_transformers(d_h, theta, factor, original):
    from toycards.lang.interpret import run
    from toycards.library import library_algorithms, library_card

    card = library_card("prelude")
    values = {"θ": theta, "s": factor, "n_orig": float(original), "β_fast": 32.0, "β_slow": 1.0}
    divisors = np.asarray(
        run(card, [np.ones(d_h // 2)], values, algorithm="yarn_divisors", library=library_algorithms())
    )
    want, attention_factor = yarn_reference(d_h, theta, factor, original)
    got = inverse_frequencies(d_h, theta) / divisors
    np.testing.assert_allclose(got, want, rtol=2e-6)  # transformers computes in float32
    kept, divided = np.isclose(divisors, 1.0), np.isclose(divisors, factor)
    assert kept.any() and divided.any() and (~kept & ~divided).any(), divisors  # every regime occurs
    assert attention_factor == pytest.approx(1 + 0.1 * math.log(factor))  # the m the card computes


@pytest.fixture(scope="module")
def yarn_files(tiny, tmp_path_factory):
    """The tiny Llama with YaRN as llama.cpp's converter writes it (type, factor, original context),
    and the same with llama.cpp's rope.scaling.attn_factor and a yarn_attn_factor it does not read."""
    model, config, _ = tiny
    assert config.max_position_embeddings == YARN["factor"] * YARN["original_max_position_embeddings"]
    root = tmp_path_factory.mktemp("yarn")
    R, f32 = gguf.Keys.Rope, gguf.GGUFValueType.FLOAT32
    keys = {R.FREQ_BASE: (THETA, f32), R.SCALING_TYPE: "yarn", R.SCALING_FACTOR: (YARN["factor"], f32),
            R.SCALING_ORIG_CTX_LEN: YARN["original_max_position_embeddings"]}  # fmt: skip
    factors = {
        R.SCALING_ATTN_FACTOR: (0.8, f32),
        R.SCALING_YARN_ATTN_FACTOR: (0.5, f32),
    }  # the second: unread
    files = {"yarn": keys, "yarn+attn_factor": keys | factors}
    return {  # with a vocabulary (write_gguf), so that llama.cpp loads them too
        name: write_gguf(model, config, root / f"{name}.gguf", "llama",
                         extra_kv={k.format(arch="llama"): v for k, v in kv.items()})
        for name, kv in files.items()
    }  # fmt: skip


def test_yarn_reference_agrees_with_transformers(tiny):
    model, config, state = tiny
    inv_freq, attention_factor = yarn_reference(D_H, THETA, **YARN_ARGS)
    want = hf_with_rope(model, config, {"rope_type": "yarn", **YARN})
    got = llama_reference(state, config, IDS, inv_freq, attention_factor)
    assert np.abs(got - want).max() < 1e-4, worst(got, want)


YARN_ARGS = dict(factor=YARN["factor"], original=YARN["original_max_position_embeddings"])
YARN_CASES = {  # file → the magnitude llama.cpp gives every rotated entry
    "yarn": 1 + 0.1 * math.log(YARN["factor"]),
    "yarn+attn_factor": 0.8 * (1 + 0.1 * math.log(YARN["factor"])),  # hand-computed: llama.cpp's rule
}


@pytest.mark.parametrize("target", ["reference", "numpy", "torch"])
@pytest.mark.parametrize("name", list(YARN_CASES))
def test_yarn_matches_the_reference(tiny, yarn_files, name, target):
    _, config, state = tiny
    inv_freq, _ = yarn_reference(D_H, THETA, **YARN_ARGS)
    want = llama_reference(state, config, IDS, inv_freq, YARN_CASES[name])
    got = load(yarn_files[name], target=target).logits(IDS)
    assert_logits_close(got, want, what=f"{name}, {target}")
    unscaled = llama_reference(state, config, IDS, inverse_frequencies(D_H, THETA))
    assert np.abs(want - unscaled).max() > 0.05, worst(want, unscaled)  # YaRN matters at these positions
    no_magnitude = llama_reference(state, config, IDS, inv_freq)
    assert np.abs(want - no_magnitude).max() > 0.05, worst(want, no_magnitude)  # and so does m


@pytest.mark.skipif(
    _llama_cpp_python() is None, reason="llama-cpp-python is not installed (a benchmark dependency)"
)
@pytest.mark.parametrize("name", list(YARN_CASES))
def test_llama_cpp_runs_yarn_as_the_card_does(tiny, yarn_files, name, tmp_path):
    _, config, state = tiny
    out = tmp_path / "llama_cpp.npy"
    script = Path(__file__).resolve().parents[1] / "peers" / "llama_cpp_logits.py"
    subprocess.run(
        [_llama_cpp_python(), script, yarn_files[name], json.dumps(IDS), out], check=True, timeout=300
    )
    inv_freq, _ = yarn_reference(D_H, THETA, **YARN_ARGS)
    want = llama_reference(state, config, IDS, inv_freq, YARN_CASES[name])
    assert_logits_close(np.load(out), want, atol=2e-5 * max(1.0, float(np.abs(want).max())), what=name)


# Every card that reads rope.scaling.type, on a transformers model of its family configured with
# YaRN: θ = THETA where the converter writes rope.freq_base, llama.cpp's default 10000 where it
# writes none (gemma, gemma2, phi2, stablelm); phi2 and stablelm rotate part of each head only, so YaRN's
# ramp runs over d_r entries and its magnitude reaches those alone (transformers: the rotated slice).
YARN_FAMILIES = {
    "qwen2": THETA,
    "starcoder2": THETA,
    "olmo2": THETA,
    "gemma": 10000.0,
    "phi2": 10000.0,
    "stablelm": 10000.0,
    "gemma2": 10000.0,
    "olmoe": THETA,
    "qwen2moe": THETA,
    "qwen3moe": THETA,
    "mixtral": THETA,
    "arcee": THETA,  # (ArceeModel writes a YaRN rope_scaling under these keys)
}  # fmt: skip  (mixtral: a llama file with experts)


@pytest.fixture(scope="module")
def yarn_family_files(tmp_path_factory):
    """arch → (a tiny transformers model configured with YaRN, its file as llama.cpp's converter
    writes it, the same file without the YaRN keys)."""
    root, out = tmp_path_factory.mktemp("yarn-families"), {}
    for arch, theta in YARN_FAMILIES.items():
        rope = {"rope_type": "yarn", "rope_theta": theta, **YARN}
        extra = (
            {"partial_rotary_factor": ARCHS[arch].defaults["partial_rotary_factor"]}
            if arch in ("phi2", "stablelm")
            else {}
        )
        shape = ARCHS[arch].defaults  # MixtralConfig's head_dim is None, which its YaRN cannot read
        size = {"head_dim": shape["hidden_size"] // shape["num_attention_heads"]} if arch == "mixtral" else {}
        model, config = tiny_model(arch, seed=5, rope_theta=theta, rope_parameters=rope | extra, **size)
        R = gguf.Keys.Rope
        keys = {R.SCALING_TYPE: "yarn", R.SCALING_FACTOR: (YARN["factor"], gguf.GGUFValueType.FLOAT32),
                R.SCALING_ORIG_CTX_LEN: YARN["original_max_position_embeddings"]}  # fmt: skip
        name = gguf.MODEL_ARCH_NAMES[ARCHS[arch].gguf_arch]  # general.architecture
        path = write_gguf(model, config, root / f"{arch}-yarn.gguf", arch,
                          extra_kv={k.format(arch=name): v for k, v in keys.items()})  # fmt: skip
        plain = write_gguf(model, config, root / f"{arch}-plain.gguf", arch)
        out[arch] = model, path, plain
    return out


@pytest.mark.parametrize("target", ["numpy", "torch"])
@pytest.mark.parametrize("arch", list(YARN_FAMILIES))
def test_every_family_runs_yarn_as_transformers_does(yarn_family_files, arch, target):
    from oracle.hf_gguf import hf_logits

    model, path, plain = yarn_family_files[arch]
    ids = IDS[:48]  # past the original context of 32
    want = hf_logits(model, ids)
    assert_logits_close(load(path, target=target).logits(ids), want, what=f"{arch} yarn, {target}")
    if target == "numpy":  # the file without its YaRN keys is far off: the keys are what is read
        unscaled = load(plain, target=target).logits(ids)
        assert np.abs(unscaled - want).max() > 0.05, worst(unscaled, want)


def test_the_interpreter_runs_yarn_on_a_partial_rotary_card(yarn_family_files):
    from oracle.hf_gguf import hf_logits

    model, path, _ = yarn_family_files["stablelm"]
    ids = IDS[:40]
    assert_logits_close(load(path, target="reference").logits(ids), hf_logits(model, ids), what="stablelm")


def test_a_scaling_a_card_does_not_model_is_refused_not_run_unscaled(tmp_path):
    """gemma3.card models linear scaling only: a YaRN Gemma 3 file stops at binding, naming the key."""
    from toycards.errors import ToycardsError

    model, config = tiny_model("gemma3")
    path = write_gguf(
        model, config, tmp_path / "g3.gguf", "gemma3", extra_kv={"gemma3.rope.scaling.type": "yarn"}
    )
    with pytest.raises(ToycardsError, match=r"scaling = 'yarn' is not one of \{none, linear\}"):
        load(path, target="numpy")


def test_olmo3_scales_rope_on_its_global_blocks_only(tmp_path):
    """OLMo 3's YaRN reaches the blocks without a window only: transformers configures RoPE per layer
    type, and llama.cpp keeps freq_scale_swa = 1 on the sliding blocks (measured with llama.cpp: it
    agrees with transformers to 3e-6 this way, and is 0.9 off transformers with YaRN on every block)."""
    from oracle.hf_gguf import hf_logits

    full = {"rope_type": "yarn", "rope_theta": 5e5, **YARN}
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 5e5}, "full_attention": full}
    model, config = tiny_model("olmo3", seed=4, rope_parameters=rope)
    R = gguf.Keys.Rope
    keys = {R.SCALING_TYPE: "yarn", R.SCALING_FACTOR: (YARN["factor"], gguf.GGUFValueType.FLOAT32),
            R.SCALING_ORIG_CTX_LEN: YARN["original_max_position_embeddings"]}  # fmt: skip
    path = write_gguf(model, config, tmp_path / "olmo3-yarn.gguf", "olmo3",
                      extra_kv={k.format(arch="olmo2"): v for k, v in keys.items()})  # fmt: skip
    ids = IDS[:48]  # past the original context of 32, and past the window of 4
    want = hf_logits(model, ids)
    for target in ("numpy", "torch"):
        assert_logits_close(load(path, target=target).logits(ids), want, what=f"olmo3 yarn, {target}")
    everywhere, _ = tiny_model("olmo3", seed=4, rope_parameters=dict.fromkeys(rope, full))
    assert np.abs(hf_logits(everywhere, ids) - want).max() > 0.05  # the case tells the two apart
