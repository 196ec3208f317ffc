"""toycards.gguf.reader against gguf.GGUFWriter-written files, gguf.GGUFReader, and broken files.

Oracles: the values we wrote, and `gguf.GGUFReader` reading the same file.
"""

from __future__ import annotations

import math
import re
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, quants
from gguf_factory import (
    Q,
    RawGGUF,
    RawKV,
    RawTensor,
    V,
    layout,
    llama_hparams,
    random_blocks,
    typed,
    vocab_kv,
    write_gguf,
)

import toycards.gguf.reader as rg
from toycards.errors import ToycardsError
from toycards.gguf.metadata import check_hparams
from toycards.gguf.reader import open_gguf

RNG = np.random.default_rng(0)

KV = {
    "t.u8": typed(250, V.UINT8),
    "t.i8": typed(-128, V.INT8),
    "t.u16": typed(65535, V.UINT16),
    "t.i16": typed(-32768, V.INT16),
    "t.u32": typed(2**32 - 1, V.UINT32),
    "t.i32": typed(-(2**31), V.INT32),
    "t.u64": typed(2**64 - 1, V.UINT64),
    "t.i64": typed(-(2**63), V.INT64),
    "t.f32": typed(0.1, V.FLOAT32),
    "t.f64": typed(0.1, V.FLOAT64),
    "t.true": typed(True, V.BOOL),
    "t.false": typed(False, V.BOOL),
    "t.str": typed("héllo ▁wörld 🙂", V.STRING),
    "t.arr_u8": typed(list(range(256)), V.ARRAY, V.UINT8),
    "t.arr_i32": typed([-1, 0, 2**31 - 1], V.ARRAY, V.INT32),
    "t.arr_u64": typed([0, 2**64 - 1], V.ARRAY, V.UINT64),
    "t.arr_f32": typed([0.5, -1.25, 3e38], V.ARRAY, V.FLOAT32),
    "t.arr_f64": typed([math.pi, -0.0], V.ARRAY, V.FLOAT64),
    "t.arr_bool": typed([True, False, True], V.ARRAY, V.BOOL),
    "t.arr_str": typed(["", "a", "ünï", "x" * 1000], V.ARRAY, V.STRING),
    "t.nested": typed([[1, 2], [3, 4, 5]], V.ARRAY),
    "t.nested_str": typed([["a"], ["b", "c"]], V.ARRAY),
}
TENSOR_TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q5_1, Q.Q4_K, Q.Q6_K]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A file with every value type and tensors of several types and ranks."""
    tensors = {f"w.{t.name}": (RNG.standard_normal((3, 2, 256)), t) for t in TENSOR_TYPES}
    for t in (Q.Q4_K, Q.Q6_K):  # gguf.quants cannot quantise K-types: random blocks
        tensors[f"w.{t.name}"] = (random_blocks(t, (3, 2, 256), RNG), t)
    tensors["i32"] = np.arange(-5, 5, dtype=np.int32)
    tensors["f16_native"] = RNG.standard_normal((7, 5)).astype(np.float16)
    return write_gguf(tmp_path_factory.mktemp("rt") / "all.gguf", kv=KV, tensors=tensors)


def _flat(v):
    if isinstance(v, list) and v and isinstance(v[0], list | np.ndarray):
        return [x for item in v for x in _flat(list(item))]
    return list(v) if isinstance(v, list | np.ndarray) else v


def _plain(v):
    return [x.item() if isinstance(x, np.generic) else x for x in v] if isinstance(v, list) else v


# -- round trip -------------------------------------------------------------------


def test_metadata_matches_what_was_written_and_gguf_reader(written):
    reader = GGUFReader(written)
    with open_gguf(written) as f:
        assert f.version == 3 and f.alignment == 32
        assert list(f.metadata) == [k for k in reader.fields if not k.startswith("GGUF.")]
        for key, t in KV.items():
            got, field = f.metadata[key], reader.fields[key]
            assert f.value_type(key).split("[")[0] == field.types[0].name.lower(), key
            if isinstance(t.value, list):
                assert f.array_len(key) == len(t.value)
                want = _flat(t.value)
                if t.sub_type == V.FLOAT32:  # stored as float32: compare at that precision
                    want = np.float32(want).tolist()
                assert _plain(_flat(got)) == want == field.contents(), key
            else:
                want = float(np.float32(t.value)) if t.vtype == V.FLOAT32 else t.value
                assert got == want == field.contents() and type(got) is type(want), key


def test_value_types_are_named(written):
    with open_gguf(written) as f:
        assert f.value_type("t.u8") == "uint8"
        assert f.value_type("t.str") == "string"
        assert f.value_type("t.arr_str") == "array[string]"
        assert f.value_type("t.arr_f64") == "array[float64]"
        assert f.value_type("t.nested") == "array[array]"
        assert f.metadata["t.nested"][1].tolist() == [3, 4, 5]
        assert f.metadata["t.nested_str"] == [["a"], ["b", "c"]]
        assert f.metadata["t.arr_bool"].dtype == np.bool_
        assert not f.metadata["t.arr_i32"].flags.writeable  # cached: callers cannot change it
        with pytest.raises(ToycardsError, match=r"'t.u8' is a uint8, not an array"):
            f.array_len("t.u8")
        with pytest.raises(ToycardsError, match=r"missing metadata key 't.u9' \(did you mean 't.u8'\?\)"):
            f.require("t.u9")
        assert f.get("nope", 7) == 7 and f.require("t.u8") == 250
        with pytest.raises(KeyError):  # the Mapping contract
            f.metadata["nope"]


def test_tensor_table_and_data_match_gguf_reader(written):
    reader = GGUFReader(written)
    with open_gguf(written) as f:
        assert list(f.tensors) == [t.name for t in reader.tensors]
        for rt in reader.tensors:
            info = f.tensors[rt.name]
            assert info.shape == tuple(int(d) for d in reversed(rt.shape.tolist()))
            assert (info.ggml_type, info.type_name) == (int(rt.tensor_type), rt.tensor_type.name)
            assert (info.offset, info.n_bytes, info.n_elements) == (rt.data_offset, rt.n_bytes, rt.n_elements)
            raw = f.raw(rt.name)
            assert raw.shape == rt.data.shape and raw.dtype == rt.data.dtype and not raw.flags.writeable
            assert raw.tobytes() == rt.data.tobytes()
            read = f.read(rt.name)  # the same bytes, in fresh memory of the process
            assert read.shape == raw.shape and read.dtype == raw.dtype and read.flags.writeable
            assert read.tobytes() == rt.data.tobytes() and not np.shares_memory(read, raw)
            plain = rt.tensor_type == Q.I32  # gguf.quants does not cast integer tensors
            want = rt.data if plain else quants.dequantize(rt.data, rt.tensor_type)
            want = want.astype(np.float32).reshape(info.shape)
            got = f.tensor(rt.name)
            assert got.dtype == np.float32 and got.shape == info.shape
            np.testing.assert_array_equal(got, want, err_msg=rt.name)


def test_tensor_dtype_and_copy(written):
    with open_gguf(written) as f:
        view = f.tensor("w.F32")
        assert not view.flags.writeable  # F32 as float32: a view of the file
        copy = f.tensor("w.F32", copy=True)
        assert copy.flags.writeable and np.array_equal(copy, view)
        assert f.tensor("w.Q8_0", dtype=np.float64).dtype == np.float64
        assert f.tensor("i32").tolist() == list(range(-5, 5))
        with pytest.raises(ToycardsError, match=r"no tensor named 'w.Q8_1' \(did you mean"):
            f.tensor("w.Q8_1")


def test_close_keeps_what_was_read(written):
    f = open_gguf(written)
    tokens = f.metadata["t.arr_str"]
    raw = f.raw("w.Q8_0")
    f.close()
    f.close()  # idempotent
    assert f.metadata["t.arr_str"] is tokens and f.metadata["t.u8"] == 250
    assert raw.tobytes()  # still mapped
    with pytest.raises(ToycardsError, match="closed"):
        f.metadata["t.arr_u8"]
    with pytest.raises(ToycardsError, match="closed"):
        f.tensor("w.F32")
    with pytest.raises(ToycardsError, match="closed"):
        f.read("w.F32")
    assert "closed" in repr(f)


def test_read_refuses_a_file_that_changed_size(written, tmp_path):
    """`read` opens the path again: a file rewritten since (another size) is refused, as `raw` refuses it."""
    import shutil

    path = shutil.copy(written, tmp_path / "copy.gguf")
    with open_gguf(path) as f:
        with open(path, "ab") as fh:
            fh.write(b"\0" * 64)
        with pytest.raises(ToycardsError, match="changed size"):
            f.read("w.F32")


def test_alignment_is_respected(tmp_path):
    p = write_gguf(
        tmp_path / "a.gguf", tensors={"a": np.ones(3, np.float32), "b": np.ones(5, np.float32)}, alignment=64
    )
    with open_gguf(p) as f:
        assert f.alignment == 64 and f.data_offset % 64 == 0
        assert [t.offset % 64 for t in f.tensors.values()] == [0, 0]
        assert f.tensor("b").tolist() == [1.0] * 5


def test_real_vocabulary_matches_gguf_reader():
    vocab = Path(__file__).resolve().parents[2].parent / "shared" / "vocab"
    if not vocab.is_dir():
        pytest.skip(f"no shared vocabularies beside this checkout ({vocab})")
    path = vocab / "ggml-vocab-llama-spm.gguf"
    reader = GGUFReader(path)
    with open_gguf(path) as f:
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            got, want = f.metadata[key], field.contents()
            assert _plain(list(got) if isinstance(got, np.ndarray) else got) == want, key
        assert check_hparams(f) == []


# -- laziness ---------------------------------------------------------------------


def test_big_vocabulary_is_not_decoded_to_open(tmp_path, monkeypatch):
    n = 150_000
    path = RawGGUF(kv=vocab_kv(n, n)).write(tmp_path / "vocab.gguf")
    decoded = []
    real = rg.decode_array
    monkeypatch.setattr(rg, "decode_array", lambda *a, **k: decoded.append(a[3]) or real(*a, **k))
    with open_gguf(path) as f:
        assert f.array_len("tokenizer.ggml.tokens") == n and f.array_len("tokenizer.ggml.merges") == n
        assert f.value_type("tokenizer.ggml.merges") == "array[string]"
        assert f.get("tokenizer.ggml.model") == "gpt2"
        assert check_hparams(f) == []
        assert decoded == []  # nothing decoded so far
        tokens = f.metadata["tokenizer.ggml.tokens"]
        assert decoded == ["value of 'tokenizer.ggml.tokens'"]
        assert len(tokens) == n and tokens[12345] == "tok12345"
        assert f.metadata["tokenizer.ggml.tokens"] is tokens  # cached
        assert f.metadata["tokenizer.ggml.merges"][-1] == f"t{(n - 1) % 977} k{n - 1}"


# -- unknown tensor type ----------------------------------------------------------


def test_unknown_tensor_type_keeps_metadata_and_other_tensors(tmp_path):
    infos, size = layout([("good", (4,), Q.F32)])
    infos.append(RawTensor("blk.0.attn_q.weight", (8,), 99, size))
    data = np.arange(4, dtype=np.float32).tobytes().ljust(size, b"\0") + bytes(64)
    path = RawGGUF(kv=[RawKV("general.architecture", V.STRING, "llama")], tensors=infos, data=data)
    path = path.write(tmp_path / "unknown.gguf")
    with pytest.raises(Exception):  # noqa: B017 - the motivation: gguf's reader gives up entirely
        GGUFReader(path)
    with open_gguf(path) as f:
        assert f.get("general.architecture") == "llama"
        info = f.tensors["blk.0.attn_q.weight"]
        assert info.type_name == "unknown(99)" and not info.known_type and info.shape == (8,)
        assert f.tensor("good").tolist() == [0, 1, 2, 3]
        with pytest.raises(ToycardsError) as e:
            f.tensor("blk.0.attn_q.weight")
        assert str(e.value) == f"{path}: tensor 'blk.0.attn_q.weight' has unsupported type unknown(99)"


# -- broken files -----------------------------------------------------------------


def _kv(key="general.architecture", vtype=V.STRING, value="llama", **kw):
    return RawKV(key, vtype, value, **kw)


def _file(kv=(), tensors=(("a", (32,), Q.F32),), data=None, **kw) -> RawGGUF:
    infos, size = layout(tensors)
    return RawGGUF(kv=list(kv) or [_kv()], tensors=infos, data=bytes(size) if data is None else data, **kw)


def _bad_tensor(**change) -> RawGGUF:
    f = _file()
    for k, v in change.items():
        setattr(f.tensors[0], k, v)
    return f


def _overlapping() -> RawGGUF:
    f = _file(tensors=[("a", (64,), Q.F32), ("b", (32,), Q.F32)], data=bytes(512))
    f.tensors[1].offset = 128  # inside a's [0, 256)
    return f


U64 = struct.Struct("<Q")
BAD_FILES = {
    "magic": (RawGGUF(magic=b"PK\x03\x04"), r"not a GGUF file \(magic b'PK\\x03\\x04'\)"),
    "version 1": (_file(version=1), "version 1 is no longer supported"),
    "version 4": (_file(version=4), "unsupported GGUF version 4"),
    "version 0": (_file(version=0), "unsupported GGUF version 0"),
    "big-endian": (_file(version=3 << 24), "big-endian"),
    "2^63 tensors": (_file(n_tensors=2**63), r"tensor count 9223372036854775808 .* needs at least"),
    "2^64-1 keys": (_file(n_kv=2**64 - 1), "key-value count 18446744073709551615"),
    "key length 2^32": (
        _file([RawKV("", V.UINT8, raw=U64.pack(2**32) + b"abc")]),
        "name of key #0: string length 4294967296",
    ),
    "empty key": (_file([_kv(key="")]), "key #0 has an empty name"),
    "duplicate key": (_file([_kv(), _kv()]), "duplicate key 'general.architecture'"),
    "newline in a key": (_file([_kv("a\nb"), _kv("a\nb")]), r"duplicate key 'a\\nb'"),
    "unknown value type": (_file([_kv(vtype=13, value=None, payload=b"")]), "unknown value type 13"),
    "unknown element type": (
        _file([_kv(vtype=V.ARRAY, payload=struct.pack("<IQ", 77, 1))]),
        "element type 77",
    ),
    "array length 2^62": (
        _file([_kv(vtype=V.ARRAY, payload=struct.pack("<IQ", V.UINT64, 2**62))]),
        "array length 4611686018427387904",
    ),
    "string array 2^40": (
        _file([_kv(vtype=V.ARRAY, payload=struct.pack("<IQ", V.STRING, 2**40) + bytes(64))]),
        "array length 1099511627776",
    ),
    "string length 2^32": (
        _file([_kv(vtype=V.STRING, payload=U64.pack(2**32) + b"abc")]),
        r"string length 4294967296 at offset \d+ exceeds the \d+ bytes left",
    ),
    "string in array too long": (
        _file(
            [_kv(vtype=V.ARRAY, payload=struct.pack("<IQ", V.STRING, 2) + U64.pack(1) + b"a" + U64.pack(999))]
        ),
        r"value of 'general.architecture'\[1\]: string length 999",
    ),
    "deep nesting": (
        _file(
            [_kv(vtype=V.ARRAY, payload=struct.pack("<IQ", V.ARRAY, 1) * 9 + struct.pack("<IQ", V.UINT8, 0))]
        ),
        "nested deeper than 8",
    ),
    "bad utf-8 key": (_file([_kv(key=b"\xff\xfe")]), "not valid UTF-8"),
    "alignment 0": (_file([_kv(), _kv("general.alignment", V.UINT32, 0)]), "general.alignment = 0"),
    "alignment 24": (_file([_kv(), _kv("general.alignment", V.UINT32, 24)]), "not a power of two"),
    "alignment 2^20": (_file([_kv(), _kv("general.alignment", V.UINT32, 2**20)]), "not a power of two"),
    "alignment u64": (_file([_kv(), _kv("general.alignment", V.UINT64, 32)]), "must be a uint32"),
    "empty tensor name": (_bad_tensor(name=""), "name '' is 0 bytes"),
    "name of 64 bytes": (_bad_tensor(name="n" * 64), "is 64 bytes; GGUF allows 1 to 63"),
    "duplicate tensor": (_file(tensors=[("a", (32,), Q.F32)] * 2), "duplicate tensor name 'a'"),
    "n_dims 0": (_bad_tensor(ne=()), "has 0 dimensions"),
    "n_dims 5": (_bad_tensor(ne=(1, 1, 1, 1, 32)), "has 5 dimensions"),
    "zero dim": (_bad_tensor(ne=(32, 0)), r"impossible dimensions ne=\[32, 0\]"),
    "2^64 elements": (_bad_tensor(ne=(2**32, 2**32)), "impossible dimensions"),
    "block size": (
        _bad_tensor(ne=(33,), ggml_type=Q.Q8_0),
        "rows of 33 elements, not a multiple of its block size 32",
    ),
    "misaligned": (_bad_tensor(offset=4), "data offset 4 is not a multiple of the alignment 32"),
    "data past end": (_bad_tensor(ne=(32, 2)), r"truncated: tensor 'a' data \[\d+, \d+\) lies past the end"),
    "huge offset": (_bad_tensor(offset=2**63), "lies past the end"),
    "overlap": (_overlapping(), r"tensors 'a' \[\d+, \d+\) and 'b' \[\d+, \d+\) overlap"),
}


def _assert_one_line_error(path, pattern):
    with pytest.raises(ToycardsError) as e:
        open_gguf(path).close()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    if pattern:
        assert re.search(pattern, msg), msg


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_bad_file_is_one_clear_error(tmp_path, case):
    raw, pattern = BAD_FILES[case]
    path = raw.write(tmp_path / "bad.gguf")
    _assert_one_line_error(path, pattern)


@pytest.mark.parametrize("nested", [False, True], ids=["array", "array of arrays"])
def test_bad_utf8_in_a_string_array_names_the_element(tmp_path, nested):
    """String arrays are decoded when first read: an element that is not UTF-8 is then one error
    naming it, after the elements before it and before any after it."""
    strings = struct.pack("<IQ", V.STRING, 3) + b"".join(
        U64.pack(len(s)) + s for s in (b"ok", b"\xc3\xa9", b"a\xffb")
    )
    payload = struct.pack("<IQ", V.ARRAY, 1) + strings if nested else strings
    path = _file([_kv(), _kv("t.strings", V.ARRAY, payload=payload)]).write(tmp_path / "bad.gguf")
    with open_gguf(path) as f:  # the header's walk checks lengths only
        with pytest.raises(ToycardsError) as e:
            f.metadata["t.strings"]
    where = r"\[0\]\[2\]" if nested else r"\[2\]"
    assert re.fullmatch(
        rf"{re.escape(str(path))}: value of 't.strings'{where} is not valid UTF-8: b'a\\xffb'", str(e.value)
    )


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda p: p.write_bytes(b""), r"not a GGUF file \(empty\)"),
        (lambda p: p.write_bytes(b"GGU"), r"not a GGUF file \(only 3 bytes\)"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "no such file"),
    ],
    ids=["empty", "3 bytes", "directory", "missing"],
)
def test_not_a_file(tmp_path, make, pattern):
    path = tmp_path / "x.gguf"
    make(path)
    _assert_one_line_error(path, pattern)


def test_every_truncation_is_an_error(tmp_path, written):
    """Cut a real file at every offset before the end of its last tensor's data."""
    kv = {k: v for k, v in KV.items() if k in ("t.u8", "t.str", "t.arr_str", "t.arr_i32", "t.nested")}
    full = write_gguf(
        tmp_path / "full.gguf", kv=kv, tensors={"a": np.ones(8, np.float32), "b": np.ones(3, np.float16)}
    )
    data = full.read_bytes()
    end = max(t.data_offset + t.n_bytes for t in GGUFReader(full).tensors)
    cut = tmp_path / "cut.gguf"
    for n in range(end):
        cut.write_bytes(data[:n])
        with pytest.raises(ToycardsError) as e:
            open_gguf(cut).close()
        assert "\n" not in str(e.value), (n, str(e.value))
    for n in range(end, len(data) + 1):  # only trailing padding is missing: still a valid file
        cut.write_bytes(data[:n])
        with open_gguf(cut) as f:
            assert f.tensor("b").tolist() == [1.0] * 3


def test_bad_files_use_bounded_memory(tmp_path):
    tracemalloc.start()
    try:
        for i, (raw, _) in enumerate(BAD_FILES.values()):
            path = raw.write(tmp_path / f"b{i}.gguf")
            with pytest.raises(ToycardsError):
                open_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"peak {peak / 2**20:.1f} MiB while reading bad files"


# -- check_hparams ----------------------------------------------------------------


def _hparams_file(tmp_path, kv):
    base = {k.key: k for k in llama_hparams(n_layer=2, d_e=64, d_ff=128, n_head=4, n_head_kv=2)}
    base.update({k.key: k for k in kv})
    return open_gguf(RawGGUF(kv=list(base.values())).write(tmp_path / "h.gguf"))


def test_check_hparams_accepts_a_sane_model(tmp_path):
    with _hparams_file(tmp_path, []) as f:
        assert check_hparams(f) == []


@pytest.mark.parametrize(
    "kv, fragment",
    [
        ([RawKV("llama.block_count", V.UINT32, 100_000)], "llama.block_count = 100000 is out of range 1…512"),
        (
            [RawKV("llama.attention.head_count", V.UINT32, 0)],
            "llama.attention.head_count = 0 is out of range",
        ),
        (
            [RawKV("llama.attention.head_count_kv", V.UINT32, 3)],
            "is not a multiple of llama.attention.head_count_kv",
        ),
        (
            [RawKV("llama.embedding_length", V.UINT32, 66)],
            "= 66 is not divisible by llama.attention.head_count",
        ),
        ([RawKV("llama.block_count", V.FLOAT32, 2.0)], "llama.block_count should be an integer, not float32"),
        ([RawKV("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, -1.0)], "layer_norm_rms_epsilon = -1.0"),
        ([RawKV("llama.rope.dimension_count", V.UINT32, 15)], "must be even and at most the head size 16"),
        ([RawKV("llama.feed_forward_length", V.ARRAY, [8, 8, 8], V.UINT32)], "has 3 per-layer values for 2"),
        ([RawKV("llama.expert_used_count", V.UINT32, 2)], "expert_used_count = 2 does not fit"),
        (
            [
                RawKV("tokenizer.ggml.tokens", V.ARRAY, ["a", "b"], V.STRING),
                RawKV("tokenizer.ggml.eos_token_id", V.UINT32, 2),
            ],
            "tokenizer.ggml.eos_token_id = 2 is not a token id",
        ),
        (
            [
                RawKV("tokenizer.ggml.tokens", V.ARRAY, ["a", "b"], V.STRING),
                RawKV("tokenizer.ggml.scores", V.ARRAY, [0.0], V.FLOAT32),
            ],
            "tokenizer.ggml.scores has 1 entries for 2 tokens",
        ),
    ],
)
def test_check_hparams_reports_problems(tmp_path, kv, fragment):
    with _hparams_file(tmp_path, kv) as f:
        problems = check_hparams(f)
    assert any(fragment in p for p in problems), problems


def test_check_hparams_without_architecture(tmp_path):
    with open_gguf(RawGGUF(kv=[RawKV("x", V.UINT8, 1)]).write(tmp_path / "n.gguf")) as f:
        assert check_hparams(f) == ["general.architecture is missing or not a string"]
