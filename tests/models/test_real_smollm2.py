"""A real file: SmolLM2-135M-Instruct at Q4_1, against transformers reading the same file.

transformers' GGUF loader dequantizes every tensor (gguf.dequantize) into its own Llama and
builds the tokenizer from the file's metadata; toycards binds the library's Llama card to the
file. Both compute with the same dequantized weights in float32 (toycards loads with
`dequantize=True` here; the weights kept in their blocks, whose few-token kernels round x to int8
as llama.cpp does, are held to llama.cpp in tests/engine/test_quant_kernels.py), so the logits agree to
float32 rounding; the tokenizer, the chat template and greedy generation agree exactly.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from real_model import smollm2_q4_1

import toycards

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXT = "The capital of France is"
PROMPTS = [
    TEXT,
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "Émile a écrit 3 lettres à ses amis.",
]
CHAT = [{"role": "user", "content": "What is 2 + 3? Answer with a number."}]


@pytest.fixture(scope="module")
def files():
    path = smollm2_q4_1()
    kw = {"gguf_file": path.name}
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kw)
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, **kw)
    return path, hf.eval(), tok


@pytest.fixture(scope="module")
def ours(files):
    """toycards' torch model of the file, loaded once."""
    return toycards.load(files[0], target="torch", dequantize=True)


def test_describe_binds_the_llama_card_to_every_tensor(files):
    card = toycards.describe(files[0])
    assert card.main.name == "Llama"


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_logits_match_transformers_on_the_same_file(files, ours, target):
    path, hf, tok = files
    model = ours if target == "torch" else toycards.load(path, target=target, dequantize=True)
    ids = model.tokenizer.encode(TEXT)
    assert ids == tok(TEXT)["input_ids"]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    got = model.logits(ids)
    worst = float(np.abs(got - want).max())
    assert worst < 1e-4 * float(np.abs(want).max()), f"max |Δ logit| {worst:.3g} of {np.abs(want).max():.3g}"


def test_tokens_and_next_token_top1_match_transformers(files, ours):
    path, hf, tok = files
    model = ours
    for text in PROMPTS:
        ids = model.tokenizer.encode(text)
        assert ids == tok(text)["input_ids"], text
        with torch.no_grad():
            want = int(hf(torch.tensor([ids])).logits[0, -1].argmax())
        assert int(np.argmax(model.logits(ids)[-1])) == want, text


def test_sixteen_greedy_tokens_match_transformers(files, ours):
    path, hf, tok = files
    model = ours
    ids = model.tokenizer.encode(PROMPTS[2])
    cache, out = model.new_cache(), []
    logits = model._forward_numpy(np.asarray([ids]), cache)[0, -1]
    for _ in range(16):
        out.append(int(np.argmax(logits)))
        logits = model._forward_numpy(np.asarray([[out[-1]]]), cache)[0, -1]
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False)
    assert out == theirs[0][len(ids) :].tolist()


def test_chat_template_and_greedy_generation_match_transformers(files, ours):
    path, hf, tok = files
    model = ours
    prompt = model.tokenizer.apply_chat_template(CHAT)
    assert prompt == tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    ids = model.tokenizer.encode(prompt, parse_special=True)
    assert ids == tok(prompt, add_special_tokens=False)["input_ids"]
    ours = "".join(model.generate(prompt, max_tokens=12, parse_special=True))
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    theirs = tok.decode(out[0][len(ids) :], skip_special_tokens=True)
    assert ours == theirs, (ours, theirs)
