"""BERT (bert.card): embeddings of texts against `transformers`, and the WordPiece tokenizer.

The oracle is a tiny `BertModel` from a config (tests/oracle: hf_gguf.ARCHS["bert"]), written to
GGUF as llama.cpp's converter writes it, with a WordPiece vocabulary (oracle/vocab.py WPM_VOCAB).
The shared suites hold each token's embedding (the card's output) to transformers' last hidden
states on the three targets, F32 and Q8_0 (test_models_oracle.py), and on the interpreter
(test_interpreter.py). Here: what llama.cpp does around them, each against an independent reference:

- tokenization against transformers' `BertTokenizer` on the same vocabulary (ids equal);
- pooling (mean, cls, last, none) and normalisation against transformers' hidden states pooled and
  normalised by hand, as llama.cpp's build_pooling and common_embd_normalize say;
- the pooling of the file (`bert.pooling_type`, an integer) as the default, a batch of texts of
  different lengths against transformers' padded batch with its attention mask;
- `attention.causal` true makes each token's embedding independent of the tokens after it;
- llama.cpp's GELU is the tanh form whatever the checkpoint's hidden_act says;
- `generate`, `run`, `eval`, `chat` refuse in one line; `toycards embed` prints and writes them.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from cli_run import cli, one_error
from encoder_checks import cached_passes_run_the_tokens_so_far
from oracle.hf_gguf import write_gguf
from oracle.vocab import WPM_VOCAB
from test_models_oracle import assert_logits_close

from toycards.errors import ToycardsError
from toycards.models.load import load
from toycards.tokenizer.tokenizer import load_tokenizer

TARGETS = ("reference", "numpy", "torch")
TEXTS = ["Hello, world!", "The cat is playing with a dog.", "New-York cafés: 3 cats, 12 dogs?"]
ATOL = 1e-4  # embeddings of O(1) after LayerNorm; float32 in another order (test_models_oracle.py)


@pytest.fixture(scope="module")
def bert(oracle_files):
    return oracle_files("bert", "F32")


@pytest.fixture(scope="module")
def models(bert):
    return {target: load(bert.path, target=target) for target in TARGETS}


@pytest.fixture(scope="module")
def hf_tokenizer():
    import transformers

    return transformers.BertTokenizer(vocab={t: i for i, t in enumerate(WPM_VOCAB)})


def hidden(model, ids: list[list[int]], mask: np.ndarray | None = None) -> np.ndarray:
    """transformers' last hidden states [B, ℓ, d_e] of a batch of ids (of one length, or padded)."""
    with torch.no_grad():
        kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return model(torch.tensor(ids), **kwargs).last_hidden_state.numpy()


def pooled(h: np.ndarray, pooling: str, mask: np.ndarray) -> np.ndarray:
    """Pooling by hand from transformers' states [ℓ, d] and the mask of real tokens: the mean of
    the real tokens (sentence-transformers' mean pooling), the first, the last real one, or all."""
    real = h[mask.astype(bool)]
    return {"mean": real.mean(0), "cls": real[0], "last": real[-1], "none": real}[pooling]


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ── the tokenizer ───────────────────────────────────────────────────────────────────────
WORDPIECE_TEXTS = [
    "Hello, world!",
    "playing unable UNPLAYABLE dogs",  # continuations (##ing, ##able), lowercased
    "Ünïcödé naïve CAFÉ",  # accents stripped after NFD
    "中文 and 中-文",  # CJK ideographs are words of their own
    "tabs\tnew\nlines\r\n  spaces",
    "a\u0000b\u200bc\ufffdd",  # NUL, a format character and U+FFFD dropped
    "3.14+2=5 $9 (yes)",  # punctuation and ASCII symbols split
    "xylophone qqq# zzz",  # words no piece starts: [UNK]
    "the [SEP] cat [MASK]",  # special tokens in the text (llama.cpp's embedding example parses them)
    "",
]


@pytest.mark.parametrize("text", WORDPIECE_TEXTS)
def test_wordpiece_ids_equal_bert_tokenizer(bert, hf_tokenizer, text):
    tok = load_tokenizer(bert.path)
    assert tok.encode(text, parse_special=True) == hf_tokenizer(text)["input_ids"]
    words = text.replace("[SEP]", "").replace("[MASK]", "")  # HF parses specials even without them
    assert tok.encode(words, add_bos=False) == hf_tokenizer(words, add_special_tokens=False)["input_ids"]


def test_normalizer_keys_keep_case_and_accents(bert, oracle_files, tmp_path):
    """tokenizer.ggml.normalizer.lowercase false (strip_accents follows it): BertTokenizer with
    do_lower_case=False, whose strip_accents follows lowercase too."""
    import transformers

    model, config = oracle_files.model("bert")
    path = write_gguf(model, config, tmp_path / "cased.gguf", "bert",
                      extra_kv={"tokenizer.ggml.normalizer.lowercase": False})  # fmt: skip
    hf = transformers.BertTokenizer(vocab={t: i for i, t in enumerate(WPM_VOCAB)}, do_lower_case=False)
    text = "hello World café cafe Dog dog"
    got = load_tokenizer(path).encode(text)
    assert got == hf(text)["input_ids"] != load_tokenizer(bert.path).encode(text)


def test_tokens_decode_to_their_words(bert):
    tok = load_tokenizer(bert.path)
    assert tok.decode(tok.encode("Hello, playing cats!")) == " hello , playing cats !"


# ── embeddings ──────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("pooling", ["mean", "cls", "last", "none"])
@pytest.mark.parametrize("target", TARGETS)
def test_embed_equals_transformers_pooled(bert, models, hf_tokenizer, target, pooling):
    ids = hf_tokenizer(TEXTS[1])["input_ids"]
    h = hidden(bert.model, [ids])[0]  # (ℓ, d_e)
    want = pooled(h, pooling, np.ones(len(ids)))
    m = models[target]
    raw = m.embed(TEXTS[1], pooling=pooling, normalize=-1)
    assert raw.dtype == np.float32 and raw.shape == want.shape
    assert_logits_close(np.atleast_2d(raw), np.atleast_2d(want), ATOL, f"{target} {pooling}, raw")
    normed = m.embed(TEXTS[1], pooling=pooling)  # llama.cpp's default: Euclidean
    assert_logits_close(np.atleast_2d(normed), np.atleast_2d(unit(want)), 1e-5, f"{target} {pooling}")


def test_embed_of_ids_is_embed_of_their_text(models, hf_tokenizer):
    ids = hf_tokenizer(TEXTS[0])["input_ids"]
    m = models["numpy"]
    assert np.array_equal(m.embed(ids), m.embed(TEXTS[0]))
    assert np.array_equal(m.embed(np.asarray(ids)), m.embed(TEXTS[0]))


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_sequences_of_one_length_run_as_one_batch(models, target):
    """Ids of one length go through the module together, [n, ℓ]: each row as it is alone."""
    m = models[target]
    seqs = [[2, 40, 50, 60, 3], [2, 60, 50, 40, 3], [2, 91, 6, 92, 3]]
    batch = m.embed(seqs, pooling="none", normalize=-1)
    for seq, got in zip(seqs, batch, strict=True):
        assert_logits_close(got, m.logits(seq), 1e-5, f"{target}: {seq} in a batch of 3")


@pytest.mark.parametrize("p", [0, 1, 3])
def test_normalisations_are_llama_cpp_s(models, p):
    """common_embd_normalize: 0 scales the largest |entry| to 32760, 1 the taxicab, p the p-norm."""
    m = models["numpy"]
    v = m.embed(TEXTS[0], normalize=-1).astype(np.float64)
    norm = {0: np.abs(v).max() / 32760.0, 1: np.abs(v).sum(), 3: (np.abs(v) ** 3).sum() ** (1 / 3)}[p]
    np.testing.assert_allclose(m.embed(TEXTS[0], normalize=p), v / norm, rtol=1e-6)
    with pytest.raises(ToycardsError, match="normalize -2"):
        m.embed(TEXTS[0], normalize=-2)


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_texts_of_different_lengths_equal_transformers_padded_batch(bert, models, hf_tokenizer, target):
    """transformers pads the batch and masks the padding; toycards runs each length by itself."""
    batch = hf_tokenizer(TEXTS, padding=True, return_tensors="np")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert len(set(mask.sum(1))) == len(TEXTS)  # three lengths
    h = hidden(bert.model, ids.tolist(), mask)
    want = np.stack([unit(pooled(h[b], "mean", mask[b])) for b in range(len(TEXTS))])
    got = models[target].embed(TEXTS)  # the file's pooling: mean
    assert got.shape == (len(TEXTS), bert.config.hidden_size)
    assert_logits_close(got, want, 1e-5, f"{target}: a batch of 3 lengths")
    tokens = models[target].embed(TEXTS, pooling="none", normalize=-1)
    for b, e in enumerate(tokens):
        assert_logits_close(e, h[b][mask[b].astype(bool)], ATOL, f"{target}: tokens of text {b}")


def test_the_file_s_pooling_is_the_default(oracle_files, tmp_path):
    """bert.pooling_type, llama.cpp's enum (0 none, 1 mean, 2 cls, 3 last); none when absent; rank (4),
    a reranker's classifier head, has no card."""
    model, config = oracle_files.model("bert")
    text = TEXTS[0]

    def embedded(pooling_type):
        path = write_gguf(model, config, tmp_path / f"p{pooling_type}.gguf", "bert",
                          extra_kv={"bert.pooling_type": pooling_type})  # fmt: skip
        m = load(path, target="numpy")
        return m.hp["pooling"], m.embed(text)

    mean, cls, none = embedded(1), embedded(2), embedded(None)
    m = load(oracle_files("bert").path, target="numpy")
    assert mean[0] == "mean" and np.array_equal(mean[1], m.embed(text, pooling="mean"))
    assert cls[0] == "cls" and np.array_equal(cls[1], m.embed(text, pooling="cls"))
    assert none[0] == "none" and none[1].shape == (len(m.tokenizer.encode(text)), config.hidden_size)
    with pytest.raises(ToycardsError, match="pooling = 4 is past its options"):
        embedded(4)


def test_causal_attention_from_the_file(oracle_files, tmp_path):
    """bert.attention.causal true: llama.cpp masks later tokens, so a prefix's embeddings are the
    first rows of the whole sequence's; false (the converter's): every token reads every other."""
    model, config = oracle_files.model("bert")
    ids = list(range(5, 17))
    for causal in (True, False):
        path = write_gguf(model, config, tmp_path / f"c{causal}.gguf", "bert",
                          extra_kv={"bert.attention.causal": causal})  # fmt: skip
        m = load(path, target="numpy")
        assert m.hp["attention"] == ("causal" if causal else "bidirectional")
        whole, prefix = m.logits(ids), m.logits(ids[:5])
        assert np.allclose(whole[:5], prefix, atol=1e-5) == causal


def test_gelu_is_the_tanh_form_whatever_hidden_act_says(oracle_files, tmp_path):
    """llama.cpp's bert runs ggml_gelu (tanh) for BERT's exact "gelu": the file of a model with exact
    GELU gives the tanh model's embeddings, a few 1e-4 from the exact model's."""
    model, config = oracle_files.model("bert")
    exact = copy.deepcopy(model)
    exact.config.hidden_act = "gelu"
    for layer in exact.encoder.layer:
        layer.intermediate.intermediate_act_fn = torch.nn.GELU()
    path = write_gguf(exact, exact.config, tmp_path / "exact.gguf", "bert")
    ids = list(range(5, 25))
    got = load(path, target="numpy").logits(ids)
    assert_logits_close(got, hidden(model, [ids])[0], ATOL, "the exact-GELU file vs the tanh model")
    assert np.abs(got - hidden(exact, [ids])[0]).max() > 10 * 1e-6


def test_cached_passes_run_the_tokens_so_far(models, bert):
    """The mask is not causal, so a pass with a cache runs every token so far again (RECOMPUTE):
    each new column is the full pass over the tokens up to it, and differs from the whole sequence's."""

    def full(m, ids):  # the model's own full pass over the tokens so far
        return m.logits(ids[0])[-1:]

    cached_passes_run_the_tokens_so_far(
        {t: models[t] for t in ("numpy", "torch")}, np.arange(10, 19)[None, :], full, ATOL
    )


# ── what an embedding model refuses, and the command ─────────────────────────────────────
def test_generate_and_eval_refuse_in_one_line(models, oracle_files):
    from toycards.models.evaluate import evaluate

    m = models["numpy"]
    assert m.outputs_embeddings
    with pytest.raises(ToycardsError, match="^generate: this model's card outputs embeddings"):
        m.generate("hello")
    with pytest.raises(ToycardsError, match="^eval: this model's card outputs embeddings"):
        evaluate(m, text="hello world")
    llama = load(oracle_files("llama").path, target="numpy")
    assert not llama.outputs_embeddings
    with pytest.raises(ToycardsError, match="not embeddings"):
        llama.embed([1, 2, 3])


@pytest.mark.parametrize("command", [["run", "-p", "hi"], ["eval", "-p", "hi there"], ["chat"]])
def test_commands_that_need_logits_refuse(bert, command):
    line = one_error(cli(command[0], bert.path, *command[1:]))
    assert line.startswith(f"error: toycards {command[0]}: this model's card outputs embeddings")


def test_embed_command(bert, models, tmp_path):
    m = models["numpy"]
    out = cli("embed", bert.path, "--text", TEXTS[0], "--text", TEXTS[1], "--target", "numpy")
    assert out.exit_code == 0, out.output
    rows = np.array([[float(v) for v in line.split()] for line in out.stdout.splitlines()])
    assert_logits_close(rows, m.embed(TEXTS[:2]), 1e-6, "stdout")

    npy, js = tmp_path / "e.npy", tmp_path / "e.json"
    assert cli("embed", bert.path, "-t", TEXTS[0], "--pooling", "none", "-o", npy).exit_code == 0
    assert np.array_equal(np.load(npy), m.embed(TEXTS[0], pooling="none"))
    assert cli("embed", bert.path, "-t", TEXTS[0], "--normalize", "-1", "-o", js).exit_code == 0
    doc = json.loads(js.read_text())
    (row,) = doc["data"]
    assert doc["object"] == "list" and row["object"] == "embedding" and row["index"] == 0
    assert np.allclose(row["embedding"], m.embed(TEXTS[0], normalize=-1), atol=1e-6)

    assert cli("embed", bert.path, "-t", "x", "-o", tmp_path / "e.txt").exit_code == 2  # usage


def test_embed_command_refuses_a_language_model(oracle_files):
    line = one_error(cli("embed", oracle_files("llama").path, "--text", "hi"))
    assert "outputs a distribution over the vocabulary, not embeddings" in line
