"""Byte-level BPE pre-tokenizers (`tokenizer.ggml.pre`) against llama.cpp, every family.

Oracle (`oracle/llama_pre.py`, which does not import toycards): llama.cpp's regex list for each
pre-tokenizer type and its loader's table of `tokenizer.ggml.pre` names, transcribed from
`src/llama-vocab.cpp`, applied the way `unicode_regex_split` applies them (regex after regex,
each on every piece; the collapsed text for `\\p{…}` regexes; non-ASCII whitespace as "\\v"
elsewhere), but with every regex run by Hugging Face `tokenizers` (Rust, Oniguruma) instead of
the `regex` package toycards uses; token ids come from `tokenizers`' BPE model on those pieces.
The oracle is itself held to llama.cpp's recorded ids (`shared/vocab/*.out`: gpt-2, starcoder,
deepseek-llm), so what it re-enacts of llama.cpp is checked where llama.cpp's output exists.

Oniguruma expresses every pattern llama.cpp lists for these families; the two it does not run
as written are the ones llama.cpp does not run as written either: GPT-2's and Llama 3's, which
llama.cpp matches with hand-written code (`unicode_regex_split_custom_*`), and for which the
oracle runs the regex that code implements (GPT-2's ends with `|\\s+`). The oracle's `$` is
Oniguruma's (also before a "\\n"); only DeepSeek LLM uses `$`, after isolating "\\r" and "\\n".

Differences found and fixed in toycards (bpe.py): DeepSeek Coder's "CJK" range U+0800–U+4E00
took non-ASCII spaces (U+3000, U+2003, …) into CJK words, which llama.cpp's std::wregex never
sees (they are "\\v" there); DeepSeek V3's `\\p{S}` took "~", which llama.cpp's collapsed
`\\p{S}` lacks; `minimax-m2` (the GPT-4o rule) was missing from the table.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

import gguf
import pytest
from oracle.llama_pre import (
    LOADER,
    REGEXES,
    SAME_REGEXES,
    UNSUPPORTED,
    gguf_metadata,
    hf_bpe,
    hf_ids,
    llama_cpp_split,
    recorded_cases,
    regexes_of,
)

from toycards.errors import ToycardsError
from toycards.gguf.reader import open_gguf
from toycards.tokenizer.bpe import PRE_TOKENIZERS, split_words
from toycards.tokenizer.tokenizer import Tokenizer

VOCAB_DIR = Path(
    os.environ.get("TOYCARDS_VOCAB_DIR", Path(__file__).resolve().parents[3] / "shared" / "vocab")
)
needs_vocab = pytest.mark.skipif(not VOCAB_DIR.is_dir(), reason=f"no vocabularies in {VOCAB_DIR}")
RECORDED = ["gpt-2", "starcoder", "deepseek-llm"]  # byte-level BPE vocabularies with llama.cpp's ids

# Tricky strings; characters that Unicode normalisation would change are written as escapes.
CORPUS = [
    "1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 -42 1,000,000 0x1F 1e-9 v2.0.1 10:30 2024-01-01",
    "٣٤٥ ۱۲۳ १२३ ½ ² Ⅻ ① 𝟙𝟚 ０１２",
    "I'm you're he's we've they'll she'd don't it's",
    "I'M YOU'RE HE'S WE'VE THEY'LL SHE'D DON'T 'S 'T 'Re 'vE",
    "''s ' s 'x rock'n'roll o'clock '' '",
    "你好，世界！我想在apple工作1314151天～",
    "日本語のテキスト、カタカナとひらがな。ｶﾀｶﾅ",
    "한국어 텍스트입니다. 안녕하세요! ㄱㄴㄷ",
    "中文English混合123测试 abc中def",
    "🦙 😀😁 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👍🏽 ✅ 😶\u200d🌫\ufe0f",
    "a🚀b 🚀🚀 1😀2 ☀️⭐",
    "  leading",
    "trailing   ",
    "a  b   c    d",
    "\t\ttabs\tand\n\nnewlines\r\n\r\nCRLF\r",
    " \n \n\n  x \t\n y",
    "\u3000全角\u3000空白\u3000\u3000",
    "a\u00a0b\u2003c\u2009d\u202fe\u205ff\u1680g\u0085h\u2028i\u2029j",
    "你\u3000好 世\u2003界 한\u00a0국",
    "\x0b\x0c\x1c\x1d\x1e\x1f x\x00y\x7f",
    "Привет мир Ελληνικά עברית العربية हिन्दी ไทย",
    "Cửa Việt Führer naïve façade Ærøskøbing ÀÉÎÕÜ",
    "բարև Բարև გამარჯობა Ⴀ ᏣᎳᎩ ꮳꮃꭹ 𐐷𐐨 𞤀𞤢 Ⰰⰰ",
    "e\u0301 a\u0308o\u0308 n\u0303 Z\u0351\u0325a\u0310\u0346l\u0353g\u0315o",
    "\ufb01 \ufb02 ℂℍℕ ℎ \u2126 \u212a \u1fbe \u1f7d ｆｕｌｌ ＡＢＣ",
    "!!!!!! ??? ... --- ~~~ ``` *** /// ___",
    "Hello, world! (test) [x] {y} <z> @#$%^&*",
    "“quoted” ‘single’ — – … «» ¿¡ 。、，！？",
    "a~b ~c ~~ ~é ~ é $x +y =z ^w |v `u`",
    "def f(x):\n    return x**2 + 1  # comment\n",
    "if (a && b || !c) { x += 1; } else { y->z = 0; }",
    '<html><body class="a">Hi</body></html>',
    "SELECT * FROM t WHERE id=42;\n\tpath/to/file.py:12",
    "HelloWORLDHello helloWorld HTTPServer iPhone ÉCOLE École",
    "",
    " ",
    "\n",
]


def _vocab(name: str) -> Path:
    return VOCAB_DIR / f"ggml-vocab-{name}.gguf"


def _texts() -> list[str]:
    """The corpus and every test string of llama.cpp's vocabularies."""
    recorded = sorted(VOCAB_DIR.glob("*.gguf")) if VOCAB_DIR.is_dir() else []
    return CORPUS + [text for path in recorded for text, _ in recorded_cases(path)]


TEXTS = _texts()
# llama.cpp's pre-tokenizer types that have their own regex list, with the names that select them
NAMES_OF: dict[str, list[str]] = defaultdict(list)
for _name, (_kind, _) in LOADER.items():
    NAMES_OF[SAME_REGEXES.get(_kind, _kind)].append(_name)
KINDS = sorted(REGEXES)


def _family(kind: str) -> str:
    return PRE_TOKENIZERS[NAMES_OF[kind][0]].family


def _first_difference(pairs) -> str | None:
    for text, got, want in pairs:
        if got != want:
            return f"{text!r}:\n  toycards          {got}\n  llama.cpp, oracle {want}"
    return None


# --- the oracle against llama.cpp's recorded ids ----------------------------------------------


def _user_defined_cut(path: Path) -> re.Pattern:
    """Splits out the vocabulary's user-defined tokens (type 4), which llama.cpp cuts out of the
    text before pre-tokenizing (longest first; the ones here do not overlap)."""
    meta = gguf_metadata(path)
    tokens, types = meta[gguf.Keys.Tokenizer.LIST], meta[gguf.Keys.Tokenizer.TOKEN_TYPE]
    user = sorted(
        (t for t, k in zip(tokens, types) if k == gguf.TokenType.USER_DEFINED), key=len, reverse=True
    )
    return re.compile("(" + "|".join(map(re.escape, user)) + ")" if user else "(?!)")


@needs_vocab
@pytest.mark.parametrize("name", RECORDED)
def test_oracle_reproduces_llama_cpp_ids(name):
    path = _vocab(name)
    kind, flags = LOADER[gguf_metadata(path)[gguf.Keys.Tokenizer.PRE]]
    bpe, cut = hf_bpe(path, "ignore_merges" in flags), _user_defined_cut(path)
    token_id, regexes = bpe.get_vocab(), regexes_of(kind)
    pairs = []
    for text, want in recorded_cases(path):
        got: list[int] = []
        for k, fragment in enumerate(cut.split(text)):  # odd k: a user-defined token
            got += [token_id[fragment]] if k % 2 else hf_ids(bpe, llama_cpp_split(fragment, regexes))
        pairs.append((text, got, want))
    assert len(pairs) >= 40
    assert (diff := _first_difference(pairs)) is None, diff


# --- every family against the oracle ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_pre_tokenizer_splits_like_llama_cpp(kind):
    family = _family(kind)
    pairs = [(t, split_words(t, family), llama_cpp_split(t, REGEXES[kind])) for t in TEXTS]
    assert (diff := _first_difference(pairs)) is None, f"{family} ({kind}): {diff}"


@pytest.fixture(scope="module")
def gpt2_with_pre():
    """Makes a tokenizer of GPT-2's vocabulary with `tokenizer.ggml.pre` replaced."""
    with open_gguf(_vocab("gpt-2")) as f:
        yield lambda pre: Tokenizer.from_metadata(
            lambda key, default=None: pre if key == gguf.Keys.Tokenizer.PRE else f.get(key, default)
        )


@needs_vocab
@pytest.mark.parametrize("kind", KINDS)
def test_pre_tokenizer_ids_like_hf_bpe(gpt2_with_pre, kind):
    name = NAMES_OF[kind][0]
    tok = gpt2_with_pre(name)
    bpe = hf_bpe(_vocab("gpt-2"), "ignore_merges" in LOADER[name][1])
    texts = [t for t in TEXTS if "<|endoftext|>" not in t]
    pairs = [(t, tok.encode(t, add_bos=False), hf_ids(bpe, llama_cpp_split(t, REGEXES[kind]))) for t in texts]
    assert (diff := _first_difference(pairs)) is None, f"{name} ({kind}): {diff}"


# names that byte-level BPE files of the library's families carry and that share their rule with
# another name (the test above runs each rule under its first name only)
FAMILY_PRES = ["llama-bpe", "smollm", "qwen2", "refact", "olmo", "dbrx", "stablelm2", "phi-2"]


@needs_vocab
@pytest.mark.parametrize("name", FAMILY_PRES)
def test_each_family_pre_name_gives_its_rules_ids(gpt2_with_pre, name):
    """Under the name itself: llama.cpp's loader table (oracle/llama_pre.py) gives the regexes and
    flags, Hugging Face tokenizers' BPE the ids."""
    kind, flags = LOADER[name]
    tok = gpt2_with_pre(name)
    bpe = hf_bpe(_vocab("gpt-2"), "ignore_merges" in flags)
    regexes = REGEXES[SAME_REGEXES.get(kind, kind)]
    texts = [t for t in TEXTS if "<|endoftext|>" not in t]
    pairs = [(t, tok.encode(t, add_bos=False), hf_ids(bpe, llama_cpp_split(t, regexes))) for t in texts]
    assert (diff := _first_difference(pairs)) is None, f"{name} ({kind}): {diff}"


# --- the table of names ---------------------------------------------------------------------


def test_every_llama_cpp_name_is_in_the_table_with_its_flags():
    for name, (kind, flags) in LOADER.items():
        assert name in PRE_TOKENIZERS, f"llama.cpp's {name!r} ({kind}) is missing"
        pre = PRE_TOKENIZERS[name]
        assert pre.family == _family(SAME_REGEXES.get(kind, kind)), f"{name!r}: {pre.family}, not {kind}'s"
        # add_sep (a SEP token after the text, for BERT-style embedding models) is not modelled
        want = ("no_clean" not in flags, "ignore_merges" in flags, "add_bos" in flags, "no_bos" not in flags)
        assert (pre.clean_spaces, pre.ignore_merges, pre.add_bos, pre.has_bos) == want, name
    assert set(PRE_TOKENIZERS) <= set(LOADER), set(PRE_TOKENIZERS) - set(LOADER)
    assert not UNSUPPORTED & set(LOADER)


@needs_vocab
@pytest.mark.parametrize("pre", ["not-a-tokenizer", "kimi-k2", "GPT-2"])
def test_unknown_pre_tokenizer_is_a_one_line_error(gpt2_with_pre, pre):
    with pytest.raises(ToycardsError) as err:
        gpt2_with_pre(pre)
    message = str(err.value)
    assert f"tokenizer.ggml.pre {pre!r}" in message and "\n" not in message


@needs_vocab
def test_absent_pre_tokenizer_means_default(gpt2_with_pre):
    assert gpt2_with_pre(None).pre == gpt2_with_pre("").pre == "default"  # as llama.cpp's loader


# --- llama.cpp's quirks, computed by hand ----------------------------------------------------


def test_deepseek_cjk_ranges_skip_non_ascii_spaces():
    # U+3000 lies in DeepSeek's range U+0800–U+4E00, but llama.cpp matches that range against a
    # copy of the text where it is "\v"; it stays a piece of its own
    assert split_words("你\u3000好", "deepseek-coder") == ["你", "\u3000", "好"]
    assert split_words("。\u3000。", "deepseek-llm") == ["。", "\u3000", "。"]


def test_deepseek_v3_tilde_is_no_symbol():
    # " ~é": no symbol follows the space, so it stands alone; "~" then leads the letters
    assert split_words(" ~é", "deepseek-v3") == [" ", "~é"]
    assert split_words("a ~~", "deepseek-v3") == ["a", " ", "~~"]
