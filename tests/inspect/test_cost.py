"""Parameter counts and matmul FLOPs of a card (toycards/inspect/cost.py, `describe --flops`).

References: the `gguf` package's reader for the elements of every tensor of a file, and torch's
`FlopCounterMode` run over the torch module toycards generates and loads for each oracle file
(`tests/oracle`: one tiny random model per library family), for a prefill and for one decoding
step with the KV cache. The module runs with autograd on, so that every product is a torch
operation the counter sees: the C products read plain tensors and decline where autograd
records (engine/), and the counter has no formula for the CPU flash attention, which gets
torch's own SDPA formula (K^⊺·Q and V·softmax(S) over every key, GQA heads as their queries).
Small cards check the expressions and the numbers by hand.
"""

from __future__ import annotations

import importlib
import json
from contextlib import nullcontext

import gguf
import pytest
from cli_run import cli, one_error

from toycards.checker.dims import Dim
from toycards.errors import ToycardsError
from toycards.inspect.cost import card_cost, described_cost
from toycards.inspect.describe import describe
from toycards.lang.parse import parse
from toycards.library import card_architectures, card_names, library_card
from toycards.models.load import load

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")

# one oracle case per library card that reads files, and the variants that bind other tensors
CASES = (
    "gpt2", "llama", "llama-tied", "qwen2", "qwen3", "starcoder2", "granite", "smollm3", "gemma",
    "olmo2", "olmo3", "gemma2", "gemma3", "olmoe", "qwen3moe", "qwen2moe", "mixtral", "phi3",
    "phi3-split", "phi2", "phi2-fused", "stablelm", "stablelm-nobias", "stablelm2-12b", "mamba",
    "mamba-untied",
)  # fmt: skip
CASES += ("command-r", "cohere2")  # parallel block; NoPE global layers (command-r-plus: the same products)
CASES += ("bert",)  # an encoder: a pass with the cache runs every token so far again (RECOMPUTE)
CASES += ("nomic-bert",)  # an encoder with RoPE: the same, its keys rotated
CASES += ("modern-bert",)  # an encoder whose local blocks see a symmetric window
CASES += ("granitemoe", "granitemoeshared", "arcee")  # experts, and a shared expert (d_s > 0); ReLU²
CASES += ("exaone4", "exaone4-swa", "seed_oss")  # post-norms; windows and unrotated global blocks; biases
CASES += ("ernie4_5",)  # unpermuted Q/K, adjacent-pair rope, head_dim ≠ d_e/H
CASES += ("apertus",)  # an ungated MLP with xIELU, per-head q/k RMSNorm
CASES += ("ernie4_5-moe",)  # dense and MoE blocks by leading_dense_block_count and the interleave step
CASES += ("glm4moe",)  # dense and MoE blocks (zeros bound for the other kind), a NextN block not run
CASES += ("llama4",)  # dense and MoE blocks by the interleave step; chunked RoPE blocks and a NoPE one
CASES += ("gpt-oss",)  # attention with sinks, every expert of a block in the card's loop
CASES += ("mamba2",)  # a state per block: heads, groups, a grouped gated RMSNorm
CASES += ("hunyuan-dense",)  # RoPE in the card, then per-head q/k RMSNorm
CASES += ("granitehybrid", "granitehybrid-dense")  # Mamba-2 and attention blocks; experts or an MLP
CASES += ("falcon-h1",)  # attention and a Mamba-2 mixer in every block
CASES += ("lfm2",)  # convolution and attention blocks, as many of each as the per-block head_count_kv says
CASES += ("deepseek2", "deepseek3")  # latent attention, a dense block then experts; V3: expert groups
CASES += ("jamba",)  # Mamba and attention blocks (head_count_kv), dense and MoE blocks (every other one)
CASES += ("qwen3next",)  # DeltaNet and attention blocks (full_attention_interval), experts and a shared one
CASES += ("nemotron_h",)  # Mamba-2, attention and MLP blocks, one mixer each
MOE = ("olmoe", "qwen3moe", "qwen2moe", "mixtral", "granitemoeshared")
PROMPT = 7  # tokens of the prefill; the decoding step then has context PROMPT + 1
CPU_SDPA = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: (
        lambda q, k, v, *args, out_shape=None, **kwargs: flop_counter.sdpa_flop_count(q, k, v)
    )
}


def counted(model, ids, cache) -> int:
    """The FLOPs torch counts in one call of a loaded toycards model (autograd on)."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        model(torch.tensor([ids]), cache)
    return counter.get_total_flops()


@pytest.fixture(scope="module")
def described(oracle_files):
    held = {}

    def get(case):
        if case not in held:
            held[case] = describe(oracle_files(case, "F32").path)
        return held[case]

    return get


def test_the_cases_cover_every_library_family(described):
    cards = {described(case).card_path.rsplit("/", 1)[-1].removesuffix(".card") for case in CASES}
    assert cards == {name for name in card_names() if card_architectures(name)}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.filterwarnings("ignore::toycards.runtime.model_base.CacheRecomputes")  # bert's step, by design
def test_flops_equal_torch_flop_counter(case, oracle_files, described):
    path = oracle_files(case, "F32").path
    model = load(path, target="torch")
    cache = model.new_cache()
    ids = [(5 * i + 3) % 64 for i in range(PROMPT + 1)]
    prefill, step = counted(model, ids[:PROMPT], cache), counted(model, ids[PROMPT:], cache)
    want_prefill = described_cost(described(case), ctx=PROMPT)
    want_step = described_cost(described(case), ctx=PROMPT + 1)
    assert want_prefill.value(want_prefill.prefill()) == pytest.approx(prefill, rel=0.01), case
    assert want_step.value(want_step.decode()) == pytest.approx(step, rel=0.01), case
    if not model.RECOMPUTE:  # bert's tokens read later ones: its step runs them all, as described
        assert step < prefill / 2, "the decoding step ran the whole sequence again"


@pytest.mark.parametrize("case", MOE)
def test_moe_steps_run_every_expert(case, oracle_files, described, monkeypatch):
    """With the kernels off the module runs the card's MoE steps, every expert on every token: the
    count is the cost's with k (chosen experts) replaced by E; the kernel's is the cost itself."""
    from toycards.models.kernel_table import OPS

    monkeypatch.setattr(importlib.import_module(OPS["torch"]), "fast", False)
    model = load(oracle_files(case, "F32").path, target="torch")
    cost = described_cost(described(case), ctx=PROMPT)
    dense = cost.prefill().substitute({"k": Dim.name("E")})
    assert counted(model, list(range(PROMPT)), None) == cost.value(dense) > cost.value(cost.prefill())


@pytest.mark.parametrize("case", CASES)
def test_parameters_are_the_file_tensors(case, oracle_files, described):
    """Every element of every tensor once: tied heads and fused tensors included (gguf's reader)."""
    path = oracle_files(case, "F32").path
    elements = sum(int(t.n_elements) for t in gguf.GGUFReader(path).tensors)
    cost = described_cost(described(case))
    assert cost.param_total() == cost.value(cost.params()) == elements
    assert sum(p.value for p in cost.parts) == elements


def test_a_tied_head_counts_once(oracle_files, described):
    untied, tied = described_cost(described("llama")), described_cost(described("llama-tied"))
    d_e, n_v = tied.values["d_e"], tied.values["N_V"]
    assert untied.param_total() - tied.param_total() == d_e * n_v
    assert "W_u is token_embd.weight again (tied to W_e): counted once" in tied.all_notes()
    assert [p.label for p in tied.parts] == ["embeddings", "blocks", "other"]


# ── by hand ─────────────────────────────────────────────────────────────────────────────
def test_llama_expressions_and_numbers_by_hand():
    """Q, O: 2·d_e·H·d_h each per token; K, V: 2·d_e·H_kv·d_h; MLP 3 · 2·d_e·d_ff; head 2·d_e·N_V;
    per head K^⊺·Q and V·softmax(S): 2·d_h per query and key each. 16 layers of Llama 3.2 1B."""
    values = {"L": 16, "H": 32, "H_kv": 8, "d_e": 2048, "d_ff": 8192, "ℓ_max": 131072, "ε": 1e-5}
    cost = card_cost(library_card("llama"), values | {"N_V": 128256}, ctx=1000)
    assert cost.prefill_text() == "2·d_e·(L·(2·d_h·(H + H_kv) + 3·d_ff) + N_V)·N + 4·L·H·d_h·N²"
    assert cost.decode_text() == "2·d_e·(L·(2·d_h·(H + H_kv) + 3·d_ff) + N_V) + 4·L·H·d_h·N"
    per_token = 2 * 2048 * (16 * (2 * 64 * 40 + 3 * 8192) + 128256)
    assert cost.value(cost.prefill()) == per_token * 1000 + 4 * 16 * 32 * 64 * 1000**2
    assert cost.value(cost.decode()) == per_token + 4 * 16 * 32 * 64 * 1000
    block = 2 * 2048 + 2048 * 64 * 2 * (32 + 8) + 3 * 2048 * 8192
    assert cost.param_total() == 2048 * 128256 * 2 + 16 * block + 2048 + 32  # untied head, ρ of d_h/2
    assert cost.params_text() == "d_e·N_V + L·d_e·(2·d_h·(H + H_kv) + 3·d_ff + 2) + d_e·(N_V + 1) + d_h/2"


def test_example_file_by_hand():
    """examples/tiny-llama.gguf: 2 layers, d_e 64, 4 heads of 16, 2 key/value heads, d_ff 128, 1,024
    tokens, tied head, trained context 256 (N's default)."""
    cost = described_cost(describe("examples/tiny-llama.gguf"))
    per_token = 2 * 64 * (2 * (2 * 16 * 6 + 3 * 128) + 1024)
    assert cost.n == 256
    assert cost.value(cost.prefill()) == per_token * 256 + 4 * 2 * 4 * 16 * 256**2
    assert cost.value(cost.decode()) == per_token + 4 * 2 * 4 * 16 * 256
    assert cost.param_total() == 139584 == 64 * 1024 + 2 * (2 * 64 + 64 * 16 * 12 + 3 * 64 * 128) + 64


TINY = """toycards 1
Algorithm: P ← Tiny(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d_e ∈ ℕ = 8
  N_V ∈ ℕ = 16
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  W_u ∈ ℝ^{N_V×d_e}  from "output.weight"
1  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
2  X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
3  Y ← attention(X, X, X | MASK)
4  return P = softmax(W_u · Y)
"""


@pytest.mark.parametrize(
    "mask, step",
    [
        ("Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧", "2·d_e·N_V + 4·d_e·N"),
        ("Mask[t_z, t_x] = 1", "2·d_e·N_V·N + 4·d_e·N²"),
    ],
)
def test_a_card_the_cache_cannot_follow_reruns_the_sequence(mask, step):
    """Attention over all tokens (no causal mask) cannot be cached: a step costs a whole prefill."""
    card = parse(TINY.replace("MASK", mask))
    cost = card_cost(card, ctx=10)
    assert cost.prefill_text() == "2·d_e·N_V·N + 4·d_e·N²"
    assert cost.decode_text() == step
    assert cost.value(cost.prefill()) == 2 * 8 * 16 * 10 + 4 * 8 * 100
    assert bool(cost.recompute) == (mask.endswith("= 1"))
    assert cost.param_total() == 2 * 8 * 16
    model = load(TINY.replace("MASK", mask), target="torch")
    cache = model.new_cache()
    said = (
        pytest.warns(UserWarning, match="recomputes the whole sequence") if cost.recompute else nullcontext()
    )
    with said:  # (the model says so at its first pass with a cache)
        counted(model, list(range(9)), cache)
        assert counted(model, [9], cache) == cost.value(cost.decode())


MH_ATTENTION = """toycards 1
Algorithm: P ← Tiny(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d_e ∈ ℕ = 8
  N_V ∈ ℕ = 16
  H ∈ ℕ = 2
  d_a ∈ ℕ = 3
Parameters:
  W_e ∈ ℝ^{d_e×N_V}  from "token_embd.weight"^⊺
  W_q, W_k, W_v ∈ ℝ^{H·d_a×d_e}  from "q.weight", "k.weight", "v.weight"
  b_q, b_k, b_v ∈ ℝ^{H·d_a}  from "q.bias", "k.bias", "v.bias"
  W_o ∈ ℝ^{d_e×H·d_a}  from "o.weight"
  b_o ∈ ℝ^{d_e}  from "o.bias"
  W_u ∈ ℝ^{N_V×d_e}  from "output.weight"
1  for t ∈ [ℓ]: e_t ← W_e[:, x[t]]
2  X ← [e_1, …, e_ℓ]  ∷ ℝ^{d_e×ℓ}
3  Y ← MHAttention(X, X | W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, H, Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧)
4  return P = softmax(W_u · Y)
"""


def test_mhattention_projects_every_cached_token_again():
    """The paper's MHAttention (paper.card's layers) takes the context Z itself, so the cache keeps Z
    and each decoding step projects K = W_k · Z and V = W_v · Z of all N tokens again."""
    cost = card_cost(parse(MH_ATTENTION), ctx=8)
    assert cost.decode_text() == "2·d_e·(N_V + 2·H·d_a) + 4·H·d_a·(d_e + 1)·N" and not cost.recompute
    assert cost.value(cost.decode()) == 2 * 8 * (16 + 2 * 2 * 3) + 4 * 2 * 3 * (8 + 1) * 8
    model = load(MH_ATTENTION, target="torch")
    cache = model.new_cache()
    counted(model, list(range(7)), cache)
    assert counted(model, [7], cache) == cost.value(cost.decode())


def test_expressions_without_values():
    cost = card_cost(library_card("gpt2"))
    assert cost.prefill_text() == "2·d_e·(2·L·(2·d_e + d_mlp) + N_V)·N + 4·L·d_e·N²"
    assert cost.value(cost.prefill()) is None and cost.param_total() is None
    assert any(n.startswith("no value for L, N_V, d_e, d_mlp") for n in cost.all_notes())


def test_set_names_a_hyperparameter_of_the_card():
    with pytest.raises(ToycardsError, match="the card has no hyperparameter or dimension d_model"):
        card_cost(library_card("llama"), {"d_model": 4})
    with pytest.raises(ToycardsError, match="d_h is derived"):
        card_cost(library_card("llama"), {"d_h": 4})


# ── the command line ────────────────────────────────────────────────────────────────────
def test_describe_file_flops_text_and_json():
    text = cli("describe", "examples/tiny-llama.gguf", "--flops", "--ctx", "16", "--format", "text")
    assert text.exit_code == 0, text.output
    per_token = 2 * 64 * (2 * (2 * 16 * 6 + 3 * 128) + 1024)
    assert f"prefill FLOPs, N = 16  {per_token * 16 + 4 * 2 * 4 * 16 * 256:,}" in text.stdout
    assert "parameter count  139,584 (139.6k): embeddings 65,536, blocks 2 × 36,992, other 64" in text.stdout
    assert "not counted: elementwise operations, norms, softmax, RoPE, activations" in text.stdout
    out = cli("describe", "examples/tiny-llama.gguf", "--flops", "--ctx", "16", "--format", "json")
    cost = json.loads(out.stdout)["cost"]
    assert cost["flops"]["decode_step"] == per_token + 4 * 2 * 4 * 16 * 16
    assert cost["parameters"]["total"] == cost["parameters"]["file_total"] == 139584
    assert "cost" not in json.loads(cli("describe", "examples/tiny-llama.gguf", "--format", "json").stdout)


def test_describe_card_flops_with_set():
    sets = ["--set", "L=2", "--set", "H=4", "--set", "H_kv=2", "--set", "d_e=64", "--set", "d_ff=128"]
    sets += ["--set", "N_V=1024", "--set", "ell_max=256", "--set", "epsilon=1e-5"]
    out = cli("describe", "llama", "--flops", *sets)
    assert out.exit_code == 0, out.output
    assert "card  toycards/library/cards/llama.card" in out.stdout
    prefill = 2 * 64 * (2 * (2 * 16 * 6 + 3 * 128) + 1024) * 256 + 4 * 2 * 4 * 16 * 256**2
    assert f"prefill FLOPs, N = 256  {prefill:,}" in out.stdout  # N: ℓ_max
    symbolic = json.loads(cli("describe", "gpt2", "--flops", "--format", "json").stdout)
    assert symbolic["flops"]["prefill"] is None and symbolic["flops"]["N"] == 2048
    assert symbolic["flops"]["prefill_expression"].endswith("+ 4·L·d_e·N²")


@pytest.mark.parametrize(
    "args, code, words",
    [
        (("llama", "--flops", "--set", "zz=1"), 1, "the card has no hyperparameter or dimension zz"),
        (("examples/tiny-llama.gguf", "--flops", "--set", "L=1"), 1, "--set goes with a card"),
        (("examples/tiny-llama.gguf", "--ctx", "8"), 1, "--ctx and --set go with --flops"),
        (("llama", "--flops", "--format", "latex"), 1, "prints as terminal, text or json"),
        (("examples/tiny-llama.gguf", "--flops", "--format", "html"), 1, "prints as terminal, text or json"),
    ],
)
def test_describe_flops_errors(args, code, words):
    assert words in one_error(cli("describe", *args), code)
