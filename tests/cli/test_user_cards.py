"""User cards: `--card FILE` and `TOYCARDS_CARDS` for an architecture the library does not have.

The file is a tiny "toyformer": a Llama under other names (its own metadata keys and tensor
names, written with gguf.GGUFWriter, random weights, GPT-2's vocabulary cut from the example
file). Its card is the library's Llama card with those names substituted. The independent check
that the user card binds the right tensors: the same weights written under Llama's names, run by
the library's Llama card, give the same logits. Every bad case is one line on stderr, exit 1, no
traceback, and no file written.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner
from gguf_factory import typed, write_gguf

import toycards
from toycards.cli import main
from toycards.library import USER_CARDS_ENV

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-llama.gguf"
LLAMA_CARD = ROOT / "toycards" / "library" / "cards" / "llama.card"
V = gguf.GGUFValueType
IDS = [5, 17, 300, 2, 999, 64, 8]
PROMPT = "Hello world"

HP = {"L": 2, "H": 4, "H_kv": 2, "d_e": 32, "d_ff": 48, "ℓ_max": 64, "ε": 1e-5, "θ_base": 10000.0}
# card hyperparameter → (llama key, toyformer key), both without the "{arch}." prefix
KEYS = {
    "L": ("block_count", "n_layers"),
    "H": ("attention.head_count", "n_heads"),
    "H_kv": ("attention.head_count_kv", "n_kv_heads"),
    "d_e": ("embedding_length", "dim"),
    "d_ff": ("feed_forward_length", "hidden_dim"),
    "ℓ_max": ("context_length", "max_seq_len"),
    "ε": ("attention.layer_norm_rms_epsilon", "norm_eps"),
    "θ_base": ("rope.freq_base", "rope_theta"),
}
# llama tensor name (per layer: after "blk.{l-1}.") → toyformer name (after "layers.{l-1}.")
TENSORS = {
    "token_embd.weight": "tok_embeddings.weight",
    "attn_norm.weight": "attention_norm.weight",
    "attn_q.weight": "attention.wq.weight",
    "attn_k.weight": "attention.wk.weight",
    "attn_v.weight": "attention.wv.weight",
    "attn_output.weight": "attention.wo.weight",
    "ffn_norm.weight": "mlp_norm.weight",
    "ffn_gate.weight": "feed_forward.w1.weight",
    "ffn_up.weight": "feed_forward.w3.weight",
    "ffn_down.weight": "feed_forward.w2.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
    "rope_freqs.weight": "rope.freqs",
}


def toyformer_card_text(**replace: str) -> str:
    """The library Llama card with toyformer's keys and tensor names; `replace` edits it further."""
    text = LLAMA_CARD.read_text(encoding="utf-8")
    for llama, toy in KEYS.values():
        text = text.replace(f'"{{arch}}.{llama}"', f'"{{arch}}.{toy}"')
    for llama, toy in TENSORS.items():
        text = text.replace(f'"{llama}"', f'"{toy}"')
    text = text.replace('in "blk.{l-1}."', 'in "layers.{l-1}."').replace("← Llama(", "← Toyformer(")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def tokenizer_kv() -> dict[str, object]:
    """The example file's GPT-2 vocabulary (1,024 tokens), as typed metadata."""
    out = {}
    for name, field in gguf.GGUFReader(EXAMPLE).fields.items():
        if name.startswith("tokenizer."):
            types = [V(t) for t in field.types]
            out[name] = typed(field.contents(), types[0], types[1] if len(types) > 1 else None)
    return out


def llama_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights by llama name, untied output; NumPy shapes as GGUF stores them."""
    rng = np.random.default_rng(seed)
    d_e, d_ff, d_h, n_v = HP["d_e"], HP["d_ff"], HP["d_e"] // HP["H"], 1024
    per_layer = {
        "attn_norm.weight": (d_e,), "attn_q.weight": (HP["H"] * d_h, d_e),
        "attn_k.weight": (HP["H_kv"] * d_h, d_e), "attn_v.weight": (HP["H_kv"] * d_h, d_e),
        "attn_output.weight": (d_e, HP["H"] * d_h), "ffn_norm.weight": (d_e,),
        "ffn_gate.weight": (d_ff, d_e), "ffn_up.weight": (d_ff, d_e), "ffn_down.weight": (d_e, d_ff),
    }  # fmt: skip
    shapes = {"token_embd.weight": (n_v, d_e)}
    for layer in range(HP["L"]):
        shapes |= {f"blk.{layer}.{name}": shape for name, shape in per_layer.items()}
    shapes |= {"output_norm.weight": (d_e,), "output.weight": (n_v, d_e)}
    return {
        name: (1 + 0.1 * rng.normal(size=s) if len(s) == 1 else 0.3 * rng.normal(size=s)).astype(np.float32)
        for name, s in shapes.items()
    }


def toy_name(llama_name: str) -> str:
    if llama_name.startswith("blk."):
        _, layer, rest = llama_name.split(".", 2)
        return f"layers.{layer}.{TENSORS[rest]}"
    return TENSORS[llama_name]


def write_model(path: Path, arch: str, shapes: dict[str, tuple[int, ...]] | None = None, drop=()) -> Path:
    """The weights of `llama_weights` under llama's or toyformer's names and keys."""
    toy = arch != "llama"
    kv = {f"{arch}.{KEYS[n][toy]}": typed(v, V.FLOAT32 if isinstance(v, float) else V.UINT32)
          for n, v in HP.items() if n not in drop}  # fmt: skip
    kv |= {"general.name": f"tiny {arch}"} | tokenizer_kv()
    tensors = {toy_name(n) if toy else n: w for n, w in llama_weights().items()}
    for name, shape in (shapes or {}).items():
        tensors[name] = np.zeros(shape, np.float32)
    return write_gguf(path, kv=kv, tensors=tensors, arch=arch)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """toy.gguf, llama.gguf (same weights, llama names), toyformer.card in a cards/ folder."""
    root = tmp_path_factory.mktemp("user")
    (root / "cards").mkdir()
    card = root / "cards" / "toyformer.card"
    card.write_text(toyformer_card_text(), encoding="utf-8")
    return {
        "toy": write_model(root / "toy.gguf", "toyformer"),
        "llama": write_model(root / "llama.gguf", "llama"),
        "card": card,
        "cards": root / "cards",
        "root": root,
    }


@pytest.fixture(autouse=True)
def no_user_cards(monkeypatch):
    monkeypatch.delenv(USER_CARDS_ENV, raising=False)


@pytest.fixture(scope="module")
def llama_logits(files):
    """The independent reference: the library Llama card on the llama-named copy of the weights."""
    model = toycards.load(files["llama"])
    assert model.bound.algorithm.name == "Llama"
    return model.logits(IDS)


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_lines(result, n: int = 1) -> list[str]:
    """Exit 1, no traceback, nothing on stdout, and `n` unindented lines on stderr (a card's
    diagnostics add the indented source line, caret and hint under each)."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and result.stdout == "", result.output
    heads = [ln for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith(" ")]
    assert len(heads) == n, result.stderr
    return heads


def assert_one_error(result, *fragments: str) -> str:
    """`error_lines(result, 1)`, and that line names every fragment."""
    (line,) = error_lines(result, 1)
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    return z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))


# ── --card ──────────────────────────────────────────────────────────────────────────────
def test_without_a_card_the_architecture_is_unknown(files):
    result = cli("run", files["toy"], "--prompt", PROMPT, "-n", "2")
    line = assert_one_error(result, "toyformer", "--card", USER_CARDS_ENV)
    assert "no card for architecture" in line
    out = cli("describe", files["toy"], "--format", "json")
    assert out.exit_code == 0 and json.loads(out.stdout)["origin"] == "declaration-only"


def test_describe_with_card_binds_every_tensor(files):
    out = cli("describe", files["toy"], "--card", files["card"], "--format", "json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["origin"] == "given" and data["card_path"] == str(files["card"])
    assert data["problems"] == []
    assert data["hyperparameters"]["L"] == {"value": 2, "source": 'key "toyformer.n_layers"'}
    assert data["hyperparameters"]["N_V"]["value"] == 1024
    in_file = {t.name for t in gguf.GGUFReader(files["toy"]).tensors}
    assert {p["tensor"] for p in data["parameters"] if p["tensor"]} == in_file
    text = cli("describe", files["toy"], "--card", files["card"], "--format", "text")
    assert f"card  given card {files['card']}" in text.stdout
    assert f"Card: the given card {files['card']}" in text.stdout


def test_run_and_eval_with_card_equal_the_library_llama(files, llama_logits):
    user = toycards.load(files["card"], weights=files["toy"])
    assert np.array_equal(user.logits(IDS), llama_logits)
    text = files["root"] / "text.txt"
    text.write_text("The cat sat on the mat.", encoding="utf-8")
    out = cli("eval", files["toy"], "--card", files["card"], "--text", text, "--json", "--per-token")
    assert out.exit_code == 0, out.output
    ids = user.tokenizer.encode(text.read_text(encoding="utf-8"))
    expected = log_softmax(toycards.load(files["llama"]).logits(ids))[np.arange(len(ids) - 1), ids[1:]]
    got = np.array([t["logprob"] for t in json.loads(out.stdout)["tokens"]])
    worst = np.abs(got - expected).max()
    assert got.shape == expected.shape and worst < 1e-5, f"max |Δ log-prob| {worst:.3g}"
    run = cli("run", files["toy"], "--card", files["card"], "--prompt", PROMPT, "-n", "4")
    assert run.exit_code == 0, run.output
    reference = "".join(toycards.load(files["llama"]).generate(PROMPT, max_tokens=4))
    assert run.stdout == PROMPT + reference + "\n"


def test_run_notes_once_when_the_cache_cannot_follow_the_card(files, tmp_path):
    """A bidirectional variant (mask 1 everywhere): `run` says once, on stderr, that decoding
    recomputes, and generates what the full pass over the tokens so far gives at each step."""
    card = tmp_path / "bidirectional.card"
    card.write_text(
        toyformer_card_text(**{"Mask[t_z, t_x] = ⟦t_z ≤ t_x⟧": "Mask[t_z, t_x] = 1"}), encoding="utf-8"
    )
    out = cli("run", files["toy"], "--card", card, "--prompt", PROMPT, "-n", "3")
    assert out.exit_code == 0, out.output
    notes = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: decoding recomputes"), out.stderr
    assert "Mask[t_z, t_x] = 1" in notes[0] and str(card) in notes[0], notes[0]
    model = toycards.load(card, weights=files["toy"], target="reference")
    ids = model.tokenizer.encode(PROMPT)
    for _ in range(3):  # greedy, each step a full pass of the interpreter over the tokens so far
        ids.append(int(np.argmax(model.logits(ids)[-1])))
    assert out.stdout == PROMPT + model.tokenizer.decode(ids[len(model.tokenizer.encode(PROMPT)) :]) + "\n"


def test_gen_with_card_imports_and_runs(files, llama_logits, tmp_path):
    dest = tmp_path / "toyformer_numpy.py"
    out = cli("gen", files["toy"], "--card", files["card"], "--target", "numpy", "-o", dest)
    assert out.exit_code == 0, out.output
    spec = importlib.util.spec_from_file_location("toyformer_numpy", dest)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # weights straight from gguf's own reader, hyperparameters as written: no toycards binding
    weights = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(files["toy"]).tensors}
    weights["rope.freqs"] = np.ones(HP["d_e"] // HP["H"] // 2, np.float32)  # the card's `or 1`
    hp = HP | {"d_h": HP["d_e"] // HP["H"], "N_V": 1024, "scaling": "none", "s": 1.0,
               "ℓ_orig": HP["ℓ_max"], "a_r": 1.0}  # fmt: skip
    logits = module.Model(hp, weights).logits(IDS)
    worst = np.abs(logits - llama_logits).max()
    assert worst < 1e-5, f"max |Δ logit| {worst:.3g}"
    assert "Toyformer" in dest.read_text(encoding="utf-8")


def test_diff_file_and_card_in_either_order(files):
    for a, b in [(files["toy"], files["card"]), (files["card"], files["toy"])]:
        out = cli("diff", a, b, "--format", "json")
        assert out.exit_code == 1, out.output  # the file's values against the card's blanks
        changes = json.loads(out.stdout)["changes"]
        assert {c["section"] for c in changes} == {"hyperparameter"}, changes
        assert {c["name"] for c in changes} == set(HP) | {
            "d_h",
            "N_V",
            "scaling",
            "s",
            "ℓ_orig",
            "a_r",
        }
    bound = files["root"] / "bound.card"
    bound.write_text(cli("describe", files["toy"], "--card", files["card"], "--format", "card").stdout)
    assert cli("diff", files["toy"], bound).exit_code == 0


def test_diff_names_each_mismatch(files, tmp_path):
    card = tmp_path / "toyformer.card"
    card.write_text(toyformer_card_text(**{'"attention.wk.weight"': '"attention.k.weight"'}))
    out = cli("diff", files["toy"], card)
    assert out.exit_code == 1, out.output
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(f"~ file mismatch in {files['toy']}: ")]
    assert len(lines) == 2 and all("'layers." in ln and ".attention.k.weight'" in ln for ln in lines), lines


# ── TOYCARDS_CARDS ──────────────────────────────────────────────────────────────────────
def test_user_folder_without_card_option(files, llama_logits, monkeypatch, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(USER_CARDS_ENV, os.pathsep.join([str(empty), str(files["cards"])]))
    out = cli("describe", files["toy"], "--format", "json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["origin"] == "user" and data["card_path"] == str(files["cards"] / "toyformer.card")
    assert data["problems"] == []
    model = toycards.load(files["toy"])
    assert np.array_equal(model.logits(IDS), llama_logits)
    assert np.array_equal(model.logits(IDS), toycards.load(files["card"], weights=files["toy"]).logits(IDS))
    assert cli("run", files["toy"], "--prompt", PROMPT, "-n", "4").exit_code == 0
    assert cli("eval", files["toy"], "--prompt", PROMPT).exit_code == 0
    gen = cli("gen", files["toy"], "--target", "numpy")
    assert gen.exit_code == 0 and "Toyformer" in gen.stdout
    d = cli("diff", files["toy"], files["card"], "--format", "json")
    assert {c["section"] for c in json.loads(d.stdout)["changes"]} == {"hyperparameter"}


def test_choice_order(files, monkeypatch, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, name in [(first, "First"), (second, "Second")]:
        folder.mkdir()
        (folder / "toyformer.card").write_text(toyformer_card_text(**{"← Toyformer(": f"← {name}("}))
        (folder / "llama.card").write_text(LLAMA_CARD.read_text().replace("← Llama(", f"← {name}Llama("))
    monkeypatch.setenv(USER_CARDS_ENV, os.pathsep.join([str(first), str(second)]))
    assert toycards.describe(files["toy"]).main.name == "First"  # folders in order
    assert toycards.describe(files["llama"]).main.name == "FirstLlama"  # before the library
    given = toycards.describe(files["toy"], card=files["card"])  # --card before everything
    assert given.main.name == "Toyformer" and given.origin == "given"
    embedded = tmp_path / "embedded.gguf"
    weights = {toy_name(n): w for n, w in llama_weights().items()}
    kv = {f"toyformer.{KEYS[n][1]}": typed(v, V.FLOAT32 if isinstance(v, float) else V.UINT32)
          for n, v in HP.items()} | {"toycards.card": toyformer_card_text(**{"← Toyformer(": "← Mine("})}  # fmt: skip
    write_gguf(embedded, kv=kv, tensors=weights, arch="toyformer")
    assert toycards.describe(embedded).main.name == "Mine"  # embedded before the folders
    monkeypatch.delenv(USER_CARDS_ENV)
    assert toycards.describe(files["llama"]).origin == "library"


# ── bad cases: one line, exit 1, no traceback, nothing written ──────────────────────────
def bad_card(tmp_path: Path, **replace: str) -> Path:
    path = tmp_path / "bad.card"
    path.write_text(toyformer_card_text(**replace), encoding="utf-8")
    return path


MISSING_TENSOR = {'"feed_forward.w3.weight"': '"feed_forward.up.weight"'}
MISSING_KEY = {'"{arch}.hidden_dim"': '"{arch}.ffn_hidden"'}


@pytest.mark.parametrize(
    "replace, fragments",
    [
        (MISSING_TENSOR, ("error:", "'layers.0.feed_forward.up.weight' is missing", "bad.card:")),
        (MISSING_KEY, ("error:", "'toyformer.ffn_hidden' is missing", "bad.card:")),
    ],
    ids=["missing-tensor", "missing-key"],
)
@pytest.mark.parametrize("command", ["run", "eval", "gen"])
def test_card_that_does_not_fit(files, tmp_path, replace, fragments, command):
    card = bad_card(tmp_path, **replace)
    dest = tmp_path / "out.py"
    args = {
        "run": ("run", files["toy"], "--card", card, "--prompt", PROMPT, "-n", "4"),
        "eval": ("eval", files["toy"], "--card", card, "--prompt", PROMPT),
        "gen": ("gen", files["toy"], "--card", card, "-o", dest),
    }[command]
    (head,) = error_lines(cli(*args), n=1)  # one line: the first problem, and how many more
    for fragment in fragments:
        assert fragment in head, (fragment, head)
    if replace is MISSING_TENSOR:  # both layers miss it: the second is counted, describe lists it
        assert head.endswith(f"1 more problem: `toycards describe {files['toy']}` lists them"), head
    assert not dest.exists()


SHAPE = {"layers.1.attention.wv.weight": (12, 32)}  # H_kv·d_h = 16 rows
WRONG_SHAPE = "'layers.1.attention.wv.weight' has shape [12×32], the card expects [16×32]"


def test_wrong_shape(files, tmp_path):
    path = write_model(tmp_path / "shape.gguf", "toyformer", shapes=SHAPE)
    dest = tmp_path / "out.py"
    for args in [("run", path, "--card", files["card"], "--prompt", PROMPT),
                 ("eval", path, "--card", files["card"], "--prompt", PROMPT),
                 ("gen", path, "--card", files["card"], "-o", dest)]:  # fmt: skip
        assert_one_error(cli(*args), "error:", WRONG_SHAPE, f"{files['card']}:")
    assert not dest.exists()


def test_describe_lists_every_mismatch(files, tmp_path):
    path = write_model(tmp_path / "shape.gguf", "toyformer", shapes=SHAPE)
    card = bad_card(tmp_path, **{'"attention.wk.weight"': '"attention.k.weight"'}, **MISSING_KEY)
    out = cli("describe", path, "--card", card, "--format", "card")
    assert out.exit_code == 1 and "Traceback" not in out.output
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 4, errors
    assert "'toyformer.ffn_hidden' is missing" in errors[0] and f"(card {card}:" in errors[0]
    assert WRONG_SHAPE in errors[3]
    assert [ln.split("'")[1] for ln in errors[1:3]] == [f"layers.{n}.attention.k.weight" for n in (0, 1)]
    data = json.loads(cli("describe", path, "--card", card, "--format", "json").stdout)
    assert len([p for p in data["problems"] if p["severity"] == "error"]) == 4


def test_unparseable_user_card_names_its_file(files, monkeypatch, tmp_path):
    folder = tmp_path / "cards"
    folder.mkdir()
    text = toyformer_card_text(**{" 2  for t ∈ [ℓ]:": " 2  for t ∈ [ℓ]: ← ←"})
    (folder / "toyformer.card").write_text(text, encoding="utf-8")
    monkeypatch.setenv(USER_CARDS_ENV, str(folder))
    line_no = next(i for i, ln in enumerate(text.splitlines(), 1) if "← ←" in ln)
    where = f"{folder / 'toyformer.card'}:{line_no}:"
    dest = tmp_path / "out.py"
    for args in [("run", files["toy"], "--prompt", PROMPT), ("describe", files["toy"]),
                 ("eval", files["toy"], "--prompt", PROMPT), ("gen", files["toy"], "-o", dest)]:  # fmt: skip
        result = cli(*args)
        assert_one_error(result, where, "error:")
        assert "^" in result.stderr  # the caret under the bad token
    assert not dest.exists()
    with pytest.raises(toycards.ToycardsError) as err:
        toycards.load(files["toy"])
    assert where in str(err.value)


def test_bad_paths(files, monkeypatch, tmp_path):
    missing = tmp_path / "nope.card"
    for command in [("run", files["toy"], "--prompt", PROMPT), ("describe", files["toy"]),
                    ("eval", files["toy"], "--prompt", PROMPT), ("gen", files["toy"])]:  # fmt: skip
        assert_one_error(cli(*command, "--card", missing), f"--card {missing}: no such file")
        assert_one_error(cli(*command, "--card", tmp_path), f"--card {tmp_path}: is a directory")
    assert cli("gen", files["card"], "--card", files["card"]).exit_code == 2  # --card needs a GGUF file
    monkeypatch.setenv(USER_CARDS_ENV, str(missing))
    assert_one_error(cli("describe", files["toy"]), USER_CARDS_ENV, str(missing), "does not exist")
    monkeypatch.setenv(USER_CARDS_ENV, str(files["card"]))
    assert_one_error(cli("run", files["toy"], "--prompt", PROMPT), USER_CARDS_ENV, "is not a folder")


def test_gen_never_overwrites_the_card(files, tmp_path):
    card = tmp_path / "mine.card"
    text = files["card"].read_text(encoding="utf-8")
    card.write_text(text, encoding="utf-8")
    result = cli("gen", files["toy"], "--card", card, "-o", card)
    assert_one_error(result, "refusing to overwrite")
    assert card.read_text(encoding="utf-8") == text
