"""Tokenizers from GGUF metadata against llama.cpp.

Oracles: the token ids llama.cpp produced for its test strings (`shared/vocab/*.out`), the
strings themselves (decoding llama.cpp's ids must give them back), and hand-computed results
of llama.cpp's rules (special-token splitting, BOS/EOS defaults, SentencePiece merge order on
a tiny vocabulary written here).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import gguf
import numpy as np
import pytest
from oracle.llama_pre import recorded_cases

from toycards.errors import ToycardsError
from toycards.gguf.reader import open_gguf
from toycards.tokenizer.bpe import (
    PRE_TOKENIZERS,
    REGEX_FAMILIES,
    ByteBPE,
    PreTokenizer,
    parse_merges,
    split_words,
)
from toycards.tokenizer.chat import render_chat
from toycards.tokenizer.merge import merge_pairs
from toycards.tokenizer.tokenizer import Tokenizer, clean_up_spaces, load_tokenizer

VOCAB_DIR = Path(
    os.environ.get("TOYCARDS_VOCAB_DIR", Path(__file__).resolve().parents[3] / "shared" / "vocab")
)
NAMES = ["gpt-2", "starcoder", "llama-spm", "phi-3", "deepseek-llm"]
needs_vocab = pytest.mark.skipif(not VOCAB_DIR.is_dir(), reason=f"no vocabularies in {VOCAB_DIR}")


def _vocab(name: str) -> Path:
    return VOCAB_DIR / f"ggml-vocab-{name}.gguf"


CASES = {name: recorded_cases(_vocab(name)) for name in NAMES} if VOCAB_DIR.is_dir() else {}
CASE_IDS = [(name, i) for name, cases in CASES.items() for i in range(len(cases))]


@pytest.fixture(scope="module")
def toks() -> dict[str, Tokenizer]:
    return {name: load_tokenizer(_vocab(name)) for name in NAMES}


def _first_difference(got: list[int], want: list[int]) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"first difference at position {at}: got {got[at : at + 5]}, llama.cpp {want[at : at + 5]}"


# --- llama.cpp's test strings ---------------------------------------------------------------


@needs_vocab
def test_every_test_string_has_expected_ids():
    assert set(CASES) == set(NAMES)  # recorded_cases checks that each string has its line of ids
    for name, cases in CASES.items():
        assert len(cases) >= 40, f"{name}: only {len(cases)} cases parsed"


@needs_vocab
@pytest.mark.parametrize(("name", "i"), CASE_IDS)
def test_encode_equals_llama_cpp(toks, name, i):
    text, want = CASES[name][i]
    got = toks[name].encode(text, add_bos=False)
    assert got == want, f"{name} {text[:40]!r}: {_first_difference(got, want)}"


@needs_vocab
@pytest.mark.parametrize(("name", "i"), CASE_IDS)
def test_decode_of_llama_cpp_ids_gives_text_back(toks, name, i):
    text, ids = CASES[name][i]
    assert toks[name].decode(ids) == text


@needs_vocab
@pytest.mark.parametrize("name", NAMES)
def test_streaming_decoder_equals_decode_on_multibyte_text(toks, name):
    tok, split_chars = toks[name], 0
    for text, ids in CASES[name]:
        if text.isascii():
            continue
        stream = tok.decoder()
        pieces = [stream.push(i) for i in ids] + [stream.flush()]
        assert "".join(pieces) == tok.decode(ids) == text
        assert not any("\ufffd" in p for p in pieces), f"{text[:30]!r}: a character was cut: {pieces}"
        split_chars += sum(not _is_utf8(tok.token_to_piece(i)) for i in ids)
    assert split_chars > 0, "no test string puts one character into several tokens"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@needs_vocab
@pytest.mark.parametrize("name", NAMES)
def test_streaming_decoder_equals_decode_on_random_ids(toks, name):
    tok, rng = toks[name], random.Random(name)
    for _ in range(50):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 12))]
        stream = tok.decoder(special=True)
        assert "".join(stream.push(i) for i in ids) + stream.flush() == tok.decode(ids, special=True), ids


# --- BOS/EOS and the leading space ----------------------------------------------------------


@needs_vocab
def test_add_bos_as_the_file_says(toks):
    hello_world = [15043, 3186]  # llama.cpp's ids for "Hello world" in both Llama vocabularies
    for name in ("llama-spm", "phi-3"):  # tokenizer.ggml.add_bos_token = true
        assert toks[name].encode("Hello world") == [1, *hello_world]
        assert toks[name].encode("Hello world", add_bos=False) == hello_world
    gpt2 = toks["gpt-2"]  # no add_bos_token key: llama.cpp's default for pre "gpt-2" is false
    want = dict(CASES["gpt-2"])["Hello world"]
    assert gpt2.encode("Hello world") == want
    assert gpt2.encode("Hello world", add_bos=True) == [50256, *want]
    assert toks["llama-spm"].encode("Hi", add_bos=False, add_eos=True)[-1] == 2


def _edited(name: str, **changes: object) -> Tokenizer:
    """A tokenizer from a vocabulary file whose metadata is changed (None deletes a key)."""
    with open_gguf(_vocab(name)) as f:
        return Tokenizer.from_metadata(lambda key, default=None: changes.get(key, f.get(key, default)))


@needs_vocab
def test_add_bos_defaults_per_pre_tokenizer():
    K = gguf.Keys.Tokenizer
    assert _edited("gpt-2", **{K.PRE: "llama-bpe"}).add_bos  # llama.cpp: Llama 3 adds BOS by default
    assert not _edited("gpt-2", **{K.PRE: "llama-bpe", K.ADD_BOS: False}).add_bos
    assert not _edited("gpt-2", **{K.PRE: "qwen2"}).add_bos
    glm = _edited("gpt-2", **{K.PRE: "chatglm-bpe", K.BOS_ID: None})  # ChatGLM has no BOS
    with pytest.raises(ToycardsError, match="no BOS"):
        glm.encode("hi", add_bos=True)


@needs_vocab
def test_spm_leading_space_follows_llama_detokenize(toks):
    tok = toks["llama-spm"]
    assert tok.encode(" Hello", add_bos=False) == [29871, 15043]  # "▁" + "▁Hello"
    assert tok.decode([29871, 15043]) == " Hello"  # the first token loses one space
    assert tok.decode([1, 15043]) == " Hello"  # after BOS the space stays
    assert tok.decode([1, 15043], special=True) == "<s> Hello"
    assert tok.decoder(at_start=False).push(15043) == " Hello"  # continuing text keeps it


# --- special tokens -------------------------------------------------------------------------


@needs_vocab
def test_parse_special(toks):
    gpt2 = toks["gpt-2"]
    a, b = gpt2.encode("a"), gpt2.encode("b")
    assert gpt2.encode("a<|endoftext|>b", parse_special=True) == [*a, 50256, *b]
    assert 50256 not in gpt2.encode("a<|endoftext|>b")
    phi3 = toks["phi-3"]  # Phi-3 drops whitespace right of special tokens; "Hello" gets "▁" after one
    assert phi3.encode("<|user|>\nHello<|end|>\n", add_bos=False, parse_special=True) == [32010, 15043, 32007]


@needs_vocab
def test_control_tokens_hidden_user_defined_shown(toks):
    gpt2 = toks["gpt-2"]
    assert gpt2.decode([50256]) == ""
    assert gpt2.decode([50256], special=True) == "<|endoftext|>"
    types = np.array(_edited("phi-3").token_type)
    types[32011] = gguf.TokenType.USER_DEFINED
    phi3 = _edited("phi-3", **{gguf.Keys.Tokenizer.TOKEN_TYPE: types})
    a, b = phi3.encode("a", add_bos=False), phi3.encode("b", add_bos=False)
    # user-defined tokens are cut out even without parse_special; Phi-3 strips the space after
    assert phi3.encode("a[PAD32011] b", add_bos=False) == [*a, 32011, *b]
    assert phi3.decode([32011]) == "[PAD32011]"
    assert toks["phi-3"].decode([32011]) == ""  # an unknown-type token is hidden like control


@needs_vocab
def test_end_of_generation_text_makes_a_control_token(toks):
    phi3 = toks["phi-3"]  # the file says </s> is user-defined; llama.cpp makes EOG texts control
    assert 2 not in phi3.encode("a</s>b") and phi3.encode("a</s>b", parse_special=True).count(2) == 1
    assert phi3.decode([2]) == "" and phi3.decode([2], special=True) == "</s>"


@needs_vocab
def test_end_of_generation_tokens(toks):
    assert toks["gpt-2"].eog_ids == {50256}
    assert toks["llama-spm"].eog_ids == {2}
    phi3 = toks["phi-3"]
    assert phi3.eos_id == 32000 and {32000, 32007} <= phi3.eog_ids and phi3.is_eog(32007)
    assert toks["starcoder"].eog_ids == {0, 4}  # <|endoftext|> and <fim_pad>
    assert phi3.eot_ids == phi3.eog_ids and phi3.bos_id == 1 and phi3.vocab_size == 32064


# --- clean-up and pre-tokenizers ------------------------------------------------------------


@needs_vocab
def test_clean_up_spaces_only_where_the_vocabulary_asks(toks):
    text = "Hello , world ' s you 're here ."
    assert toks["gpt-2"].decode(toks["gpt-2"].encode(text), clean_up=True) == "Hello, world's you're here."
    spm = toks["llama-spm"]
    assert spm.decode(spm.encode(text, add_bos=False), clean_up=True) == text
    assert clean_up_spaces(b"") == b"" and clean_up_spaces(b" 't 'd 'll") == b" 't 'd 'll"


SAMPLE = "Hello's WORLD 'RE 12345 3.14 \t\n\n  x  ¡ñandú! 你好，世界 😁 <a>\r\n"


@pytest.mark.parametrize("family", sorted(REGEX_FAMILIES))
def test_pre_tokenizers_cover_the_text(family):
    words = split_words(SAMPLE, family)
    assert "".join(words) == SAMPLE and all(words)


def test_pre_tokenizer_table_points_at_known_families():
    assert {pre.family for pre in PRE_TOKENIZERS.values()} <= set(REGEX_FAMILIES)


def test_llama3_split_hand_computed():
    words = split_words("Hello's 12345 world\n\n  x", "llama3")
    assert words == ["Hello", "'s", " ", "123", "45", " world", "\n\n", " ", " x"]


def test_bpe_merges_leftmost_on_equal_rank():
    bpe = ByteBPE({"a": 0, "aa": 1}, parse_merges(["a a"]), PreTokenizer("gpt2"))
    assert bpe.merge("aaa") == ["aa", "a"]
    assert bpe.encode("aaa") == [1, 0]


# --- a tiny SentencePiece vocabulary written here -------------------------------------------


def _tiny_spm(path: Path, add_space_prefix: bool | None) -> Tokenizer:
    T = gguf.TokenType
    extra = {"▁": -1.0, "a": -2.0, "b": -2.0, "ab": -5.0, "▁a": -3.0, "▁ab": -0.5, "ba": -5.0}
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *extra]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL, *[T.BYTE] * 256, *[T.NORMAL] * len(extra)]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + list(extra.values()))
    w.add_token_types(types)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return load_tokenizer(path)


def test_spm_merges_by_score_with_byte_fallback(tmp_path):
    tok = _tiny_spm(tmp_path / "spm.gguf", add_space_prefix=None)
    ids = {t: i for i, t in enumerate(tok.tokens)}
    assert tok.encode("ab", add_bos=False) == [ids["▁ab"]]  # ▁+a (-3) first, then ▁a+b (-0.5)
    assert tok.encode("ab") == [1, ids["▁ab"]]  # SPM adds BOS by default
    assert tok.encode("é", add_bos=False) == [ids["▁"], 3 + 0xC3, 3 + 0xA9]  # bytes C3 A9
    assert tok.decode(tok.encode("a é b", add_bos=False)) == "a é b"


def test_spm_without_space_prefix_breaks_ties_leftmost(tmp_path):
    tok = _tiny_spm(tmp_path / "spm.gguf", add_space_prefix=False)
    ids = {t: i for i, t in enumerate(tok.tokens)}
    assert tok.encode("ab", add_bos=False) == [ids["ab"]]
    assert tok.encode("bab", add_bos=False) == [ids["ba"], ids["b"]]  # "ba" and "ab" tie at -5
    assert tok.decode([ids["▁a"]]) == " a"  # no prefix was added, so none is removed


# --- errors ---------------------------------------------------------------------------------


@needs_vocab
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tokenizer.ggml.model": "t5"}, "'t5'"),  # unigram: not read (bert, WordPiece, is: test_bert.py)
        ({"tokenizer.ggml.model": None}, "tokenizer.ggml.model"),
        ({"tokenizer.ggml.pre": "not-a-tokenizer"}, "'not-a-tokenizer'"),
        ({"tokenizer.ggml.merges": None}, "merges"),
        ({"tokenizer.ggml.tokens": "abc"}, "not an array of strings"),
        ({"tokenizer.ggml.token_type": [1, 1]}, "shorter than tokenizer.ggml.tokens"),
        ({"tokenizer.ggml.token_type": ["x"] * 50257}, "malformed tokenizer metadata"),
        (
            {"tokenizer.ggml.tokens": ["a", "b", "a"], "tokenizer.ggml.token_type": None},
            "duplicate token 'a'",
        ),
    ],
)
def test_bad_metadata_raises_naming_it(changes, message):
    with pytest.raises(ToycardsError, match=message):
        _edited("gpt-2", **changes)


@needs_vocab
def test_vocabulary_texts_as_llama_cpp_reads_them():
    """An empty token text becomes "[EMPTY_<id>]" (llama.cpp's name for it); texts given as bytes
    (a getter other than a GGUF file's) are read as UTF-8."""
    tok = _edited("gpt-2", **{"tokenizer.ggml.tokens": ["a", "", b"\xc3\xa9", ""], "tokenizer.ggml.token_type": None})
    assert tok.tokens == ["a", "[EMPTY_1]", "é", "[EMPTY_3]"]
    assert tok.token_to_id == {"a": 0, "[EMPTY_1]": 1, "é": 2, "[EMPTY_3]": 3}


@needs_vocab
def test_bad_arguments_raise(toks):
    with pytest.raises(ToycardsError, match="out of range"):
        toks["gpt-2"].decode([50257])
    with pytest.raises(ToycardsError, match="str"):
        toks["gpt-2"].encode(b"bytes")  # type: ignore[arg-type]
    for name in ("gpt-2", "llama-spm"):
        with pytest.raises(ToycardsError, match="surrogate"):
            toks[name].encode("a\ud800b")


# --- chat templates -------------------------------------------------------------------------


@needs_vocab
def test_phi3_chat_template(toks):
    out = toks["phi-3"].apply_chat_template([{"role": "user", "content": "Hi"}])
    assert out == "<s><|user|>\nHi<|end|>\n<|assistant|>\n"
    with pytest.raises(ToycardsError, match="chat_template"):
        toks["gpt-2"].apply_chat_template([{"role": "user", "content": "Hi"}])


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ lipsum.__globals__['os'] }}",
        "{{ ''|attr('__class__') }}",
        "{{ messages.append(1) }}",
    ],
)
def test_hostile_chat_template_is_refused(template):
    with pytest.raises(ToycardsError, match="sandbox"):
        render_chat(template, [{"role": "user", "content": "Hi"}])


@pytest.mark.parametrize(
    ("template", "message"),
    [("{% if %}", "syntax error"), ("{{ raise_exception('no system role') }}", "no system role")],
)
def test_broken_chat_template_raises(template, message):
    with pytest.raises(ToycardsError, match=message):
        render_chat(template, [])


def test_chat_template_conventions():
    template = "{% for m in messages %}\n{{ m.content|tojson }}\n{% endfor %}{{ add_generation_prompt }}"
    assert render_chat(template, [{"content": "é<"}], add_generation_prompt=True) == '"é<"\nTrue'


def test_merge_pairs_by_hand():
    """The shared merge loop: best priority first, leftmost on ties, stale pairs skipped."""
    ranks = {("a", "b"): 0, ("b", "c"): 0, ("ab", "c"): 1, ("c", "ab"): 2}
    # "a b c": (a,b) and (b,c) tie at rank 0 → the left one merges; then (ab,c)
    assert merge_pairs(list("abc"), lambda x, y: ranks.get((x, y))) == ["abc"]
    # "b c a b": (b,c) and (a,b) tie → (b,c) first, then (a,b); (c,a) and (bc,ab) cannot merge
    assert merge_pairs(list("bcab"), lambda x, y: ranks.get((x, y))) == ["bc", "ab"]
    # after "ab" forms, the stale (b, c) pushed earlier must not merge a "b" that is gone
    assert merge_pairs(list("cabc"), lambda x, y: ranks.get((x, y))) == ["c", "abc"]
    assert merge_pairs([], lambda x, y: 0) == [] and merge_pairs(["x"], lambda x, y: 0) == ["x"]
    symbols = list("ab")
    assert merge_pairs(symbols, lambda x, y: 0) == ["ab"] and symbols == ["a", "b"]
