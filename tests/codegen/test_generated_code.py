"""Generated modules as a deliverable: deterministic, lint-clean, traceable to the card, and safe.

- Same card → same bytes, in this process and in others with different hash seeds; the library's
  GPT-2 and Llama modules equal the reviewed golden files in `tests/golden/`.
- `ruff check` passes with the project's configuration.
- No module of a library card branches on `ops.fast`; loaded, each has the kernel table's kernels in
  place of the prelude algorithms it runs as the library wrote them (what the cache plan says of each).
- Each card step is a `# N  step` comment with the card's own text (and `∷` shape); the module
  carries the card text and its SHA-256; it imports only numpy or torch, math and toycards.runtime.
- Hostile names and strings in a card (quotes, backslashes, newlines in strings, `__import__`,
  keywords, builtins and the generated code's own names, Unicode look-alikes) give code that
  compiles, consists of definitions only, has no effect when executed, and computes exactly what
  the same card with plain names computes. Metadata strings of a GGUF never reach the source.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import io
import keyword
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from toycards.codegen import generate_source
from toycards.lang.parse import parse
from toycards.lang.printer import render_card
from toycards.library import card_architectures, card_names, library_card
from toycards.models.kernel_table import KERNELS, algorithm_functions
from toycards.models.load import card_for_file, load, module_namespace

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
REGEN = ".venv/bin/python scripts/regen_golden.py"
TARGETS = ("numpy", "torch")
LIBRARY = ("gpt2", "llama")

# A card whose every name and string is hostile, and its twin with plain names. Braced
# superscripts may hold any character but braces and newlines; strings any but `"` and newline.
PLAIN = """toycards 1
▷ a tiny residual model

Algorithm: Y ← mix(X | A, b)
/* one affine map */
Input: X ∈ ℝ^{d×ℓ}
Output: Y ∈ ℝ^{d×ℓ}
Parameters:
  A ∈ ℝ^{d×d}
  b ∈ ℝ^{d}
1  Y ← A · X + b · 1^⊺  ∷ ℝ^{d×ℓ}
2  return Y

Algorithm: y ← squash(v)
/* tanh */
Input: v ∈ ℝ
Output: y ∈ ℝ
1  return y = tanh(v)

Algorithm: P ← Net(x | θ)
/* a residual stack */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  L ∈ ℕ = 2  from "{arch}.block_count"
  d ∈ ℕ = 16  from "{arch}.width"
  N_V ∈ ℕ = 20
  c ∈ ℝ = 0.5
Parameters:
  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺
  for l ∈ [L], in "blk.{l-1}.":
    A_l ∈ ℝ^{d×d}  from "a.weight"
    b_l ∈ ℝ^{d}  from "b.bias"
  U ∈ ℝ^{N_V×d}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  Z ← [e_1, …, e_ℓ]  ∷ ℝ^{d×ℓ}
4  for l = 1, 2, …, L do
5    X ← Z
6    X̃ ← c · squash(mix(X | A_l, b_l))
7    Z ← X + X̃
8  end
9  S ← U · Z
10  return P = softmax(S)
"""
# The same card with every name and string made hostile: Python keywords, builtins, the generated
# module's own names (TorchModel, NumpyModel, Model, CARD, math, ops, self, ctx, cache, runtime, str,
# print), a superscript holding a Python statement, a subscript that closes a docstring, names
# that collide once made ASCII (X_tilde, X̃), and strings with quotes, backslashes and template
# braces in descriptions, comments, metadata keys, tensor names and group prefixes.
# (QQ stands for three single quotes, DQ for three double quotes.)
EVIL = 'W^{"); __import__("os").system("touch PWNED"); ("}'
HOSTILE = (
    r"""toycards 1
▷ DQ QQ \ "); __import__("os").system("touch PWNED") #

Algorithm: Y_{DQ; import os} ← TorchModel(math | self, ops)
/* DQ + __import__("os").system("touch PWNED") + DQ \N{BULLET} \x00 " */
Input: math ∈ ℝ^{d×ℓ}
Output: Y_{DQ; import os} ∈ ℝ^{d×ℓ}
Parameters:
  self ∈ ℝ^{d×d}  ▷ "); print("pwned
  ops ∈ ℝ^{d}
1  Y_{DQ; import os} ← self · math + ops · 1^⊺  ∷ ℝ^{d×ℓ}
2  return Y_{DQ; import os}

Algorithm: print ← str(π^{__import__})
/* shadows the builtin str, which tensor-name expressions call */
Input: π^{__import__} ∈ ℝ
Output: print ∈ ℝ
1  return print = tanh(π^{__import__})

Algorithm: P ← Model(x | θ)
/* ends in a quote " */
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  class ∈ ℕ = 2  from "{arch}.block_count"
  import ∈ ℕ = 16  from "{arch}.'; import os #"
  N_V ∈ ℕ = 20
  lambda ∈ ℝ = 0.5
Parameters:
  EVIL ∈ ℝ^{import×N_V}  from "token_embd.weight'); print('x"^⊺
  for ctx ∈ [class], in "blk'\{ctx-1}.\n{{":
    NumpyModel_ctx ∈ ℝ^{import×import}  from "a.weight"
    CARD_ctx ∈ ℝ^{import}  from "b.bias\"
  U^{QQ\} ∈ ℝ^{N_V×import}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← EVIL[:, x[t]]
3  cache ← [e_1, …, e_ℓ]  ∷ ℝ^{import×ℓ}
4  for ctx = 1, 2, …, class do
5    X_tilde ← cache
6    X̃ ← lambda · str(TorchModel(X_tilde | NumpyModel_ctx, CARD_ctx))
7    cache ← X_tilde + X̃
8  end
9  runtime ← U^{QQ\} · cache
10  return P = softmax(runtime)
""".replace("QQ", "'" * 3)
    .replace("DQ", '"' * 3)
    .replace("EVIL", EVIL)
)
ALLOWED_IMPORTS = {"math", "numpy", "torch", "__future__"}


@pytest.fixture(scope="module")
def sources() -> dict[tuple[str, str], str]:
    return {
        (name, target): generate_source(library_card(name), target) for name in LIBRARY for target in TARGETS
    }


@pytest.fixture(scope="module")
def hostile() -> str:
    return HOSTILE


# ── determinism and golden files ───────────────────────────────────────────────────────────
def test_same_card_same_bytes(sources):
    for (name, target), source in sources.items():
        again = generate_source(parse(render_card(library_card(name))), target)
        assert again == source, f"{name} {target}: a second generation differs"


def test_same_bytes_under_other_hash_seeds(sources):
    script = (
        "import hashlib; from toycards.codegen import generate_source; from toycards.library import library_card\n"
        f"for n in {LIBRARY!r}:\n for t in {TARGETS!r}:\n"
        "  print(n, t, hashlib.sha256(generate_source(library_card(n), t).encode()).hexdigest())"
    )
    want = "".join(
        f"{n} {t} {hashlib.sha256(sources[n, t].encode()).hexdigest()}\n" for n in LIBRARY for t in TARGETS
    )
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == want, f"PYTHONHASHSEED={seed} gives other code"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", LIBRARY)
def test_golden_file(sources, name, target):
    path = GOLDEN / f"{name}_{target}.py"
    assert path.exists(), f"{path} is missing: run `{REGEN}`"
    want, got = path.read_text(encoding="utf-8"), sources[name, target]
    if got != want:
        a, b = want.splitlines(), got.splitlines()
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        pytest.fail(
            f"generated {name}/{target} differs from {path.name} at line {i + 1}:\n"
            f"  golden:    {a[i] if i < len(a) else '<end of file>'}\n"
            f"  generated: {b[i] if i < len(b) else '<end of file>'}\n"
            f"if the change is intended, run `{REGEN}` and review `git diff tests/golden`"
        )


@pytest.mark.parametrize("target", TARGETS)
def test_library_modules_hold_the_card_alone_and_load_with_their_kernels(target):
    """No generated module of a library card branches on `ops.fast`: it holds the card's steps.
    Loaded, each function of a prelude algorithm with a kernel on the target (the kernel table) is
    the kernel's adapter, the generated steps kept as its `__wrapped__`; the others are as written."""
    for name in (n for n in card_names() if card_architectures(n)):  # the cards that run files
        card = library_card(name)
        assert "ops.fast" not in generate_source(card, target), name
        functions = algorithm_functions(module_namespace(card, target))
        adapted = {n for n, f in functions.items() if hasattr(f, "__wrapped__")}
        assert adapted == set(KERNELS[target]) & set(functions), name


def test_kernel_sites_come_from_the_cache_plan_and_are_cached(tmp_path, monkeypatch):
    """What the loader tells the kernel table, by hand from the prelude and the Llama card: GQAttention
    runs over the tokens (ℓ) and extends the cache with K̂ and V (arguments 1 and 2 of its
    `attention` call); attention's queries (ℓ_x) are the tokens, its keys (ℓ_z) the context. Kept on
    disk; a damaged entry is computed afresh. A card's own `softmax` has no site: not the library's."""
    from toycards.models import load as loading
    from toycards.models.kernel_table import Site

    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path))
    sites = loading.kernel_sites(library_card("llama"))
    assert sites["GQAttention"] == Site(frozenset({"ℓ"}), frozenset({(1, 2)}))
    assert sites["attention"] == Site(frozenset({"ℓ_x"}), frozenset())
    (entry,) = tmp_path.glob("module-kernels-*.pickle")
    entry.write_bytes(pickle.dumps({"GQAttention": ("ℓ", "not a tuple of calls")}))
    assert loading.kernel_sites(library_card("llama")) == sites
    mine = "Algorithm: y ← softmax(x)\nInput: x ∈ ℝ^{n}\nOutput: y ∈ ℝ^{n}\n1  return y = x\n\n"
    own = parse(mine + library_card("gpt2").source.split("\n", 1)[1])
    assert "softmax" not in loading.kernel_sites(own) and "layer_norm" in loading.kernel_sites(own)


# ── lint ─────────────────────────────────────────────────────────────────────────────────
def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed")
    return [exe, "check", "--no-cache", "--config", str(ROOT / "pyproject.toml")]


def test_ruff_check_passes(sources, hostile, tmp_path):
    files = []
    for (name, target), source in sources.items():
        files.append(tmp_path / f"{name}_{target}.py")
        files[-1].write_text(source, encoding="utf-8")
    for target in TARGETS:
        files.append(tmp_path / f"hostile_{target}.py")
        files[-1].write_text(generate_source(parse(hostile), target), encoding="utf-8")
    out = subprocess.run([*_ruff(), *map(str, files)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# ── traceability: step comments, card text, hash ─────────────────────────────────────────
def card_steps(text: str) -> dict[str, list[tuple[int, str]]]:
    """Algorithm name → its numbered steps (number, text without ▷ comment, spaces collapsed)."""
    steps: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        if m := re.match(r"Algorithm( \d+)?: \S+ ← ([^(\s]+)\(", line):
            current = steps.setdefault(m.group(2), [])
        elif (m := re.match(r"\s*(\d+)  (.*)", line)) and current is not None:
            current.append((int(m.group(1)), " ".join(m.group(2).split("▷")[0].split())))
    return steps


def generated_notes(source: str) -> dict[str, list[tuple[int, str]]]:
    """Card algorithm name (from each docstring's header) → the `# N  step` comments of its body."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out: dict[str, list[tuple[int, str]]] = {}
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    functions += [n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    for fn in functions:
        doc = ast.get_docstring(fn if fn.name != "forward" else model) or ""
        name = re.match(r"\S+ ← ([^(\s]+)\(", doc).group(1)
        notes = []
        for line in lines[fn.lineno - 1 : fn.end_lineno]:
            if m := re.match(r"\s*# (\d+)  (.*)", line):
                notes.append((int(m.group(1)), " ".join(m.group(2).split())))
        out[name] = notes
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", LIBRARY)
def test_every_card_step_is_a_comment(sources, name, target):
    card_text = render_card(library_card(name)) + render_card(library_card("prelude"))
    steps = card_steps(card_text)
    for algo, notes in generated_notes(sources[name, target]).items():
        numbers = [n for n, _ in notes]
        assert numbers == sorted(set(numbers)), f"{algo}: step comments out of order: {numbers}"
        noted = dict(notes)
        for number, text in steps[algo]:
            if text in ("end", "else"):
                continue
            if text.startswith("for ") and text.endswith(" do"):  # a loop header; vectorised maps
                if " = " in text:  # a sequential loop stays a loop and keeps its comment
                    assert number in noted, f"{algo}: no comment for step {number}  {text}"
                continue
            assert noted.get(number) == text, (
                f"{algo} ({target}): step {number} is\n  card:      {text}\n  generated: {noted.get(number)}"
            )


@pytest.mark.parametrize("target", TARGETS)
def test_module_carries_card_text_and_hash(sources, target):
    for name in LIBRARY:
        namespace = execute(sources[name, target])
        text = render_card(library_card(name))
        assert namespace["CARD"] == text and namespace["Model"].CARD == text
        digest = hashlib.sha256(text.encode()).hexdigest()
        assert namespace["CARD_SHA256"] == digest and f"Card SHA-256: {digest}" in sources[name, target]
        assert parse(namespace["CARD"]) == library_card(name)


# ── imports and safety ───────────────────────────────────────────────────────────────────
def imported_modules(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add(node.module)
    return out


def _constant_default(d: ast.expr) -> bool:
    """None, or the number an optional hyperparameter defaults to (`c ∈ ℝ default 0`, `−∞`)."""
    if isinstance(d, ast.UnaryOp) and isinstance(d.op, ast.USub):
        d = d.operand
    if isinstance(d, ast.Attribute):
        return ast.unparse(d) in ("math.inf", "math.pi")
    return isinstance(d, ast.Constant) and (d.value is None or type(d.value) in (int, float))


def assert_definitions_only(tree: ast.Module) -> None:
    """Top level: docstring, imports, constant assignments, functions and one class; no decorators,
    no default but None or a number, nothing that runs code at import."""
    for node in tree.body:
        if isinstance(node, ast.Expr):
            assert isinstance(node.value, ast.Constant), ast.unparse(node)
        elif isinstance(node, ast.Assign):
            assert isinstance(node.value, ast.Constant), ast.unparse(node)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            assert not node.decorator_list, node.name
            if isinstance(node, ast.ClassDef):
                assert [ast.unparse(b) for b in node.bases] in (["TorchModel"], ["NumpyModel"])
                assert not node.keywords
                for item in node.body:
                    if isinstance(item, ast.Assign):
                        assert isinstance(item.value, ast.Constant | ast.Name | ast.List), ast.unparse(item)
                        assert all(isinstance(c, ast.Constant) for c in getattr(item.value, "elts", [])), (
                            ast.unparse(item)
                        )
                    else:
                        assert isinstance(item, ast.Expr | ast.FunctionDef), ast.unparse(item)
            defaults = node.args.defaults + node.args.kw_defaults if isinstance(node, ast.FunctionDef) else []
            assert all(_constant_default(d) for d in defaults if d), node.name
        else:
            assert isinstance(node, ast.Import | ast.ImportFrom), ast.unparse(node)


DANGEROUS = {"__import__", "eval", "exec", "compile", "open", "getattr", "setattr", "globals", "locals", "vars",
             "breakpoint", "input", "os", "sys", "subprocess", "builtins", "importlib"}  # fmt: skip


def assert_safe_identifiers(tree: ast.Module) -> None:
    """Every identifier is ASCII, no keyword, no dunder; no dangerous builtin is reachable by name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    names.discard("__future__")
    for n in names:
        assert n.isascii() and n.isidentifier() and not keyword.iskeyword(n), n
        assert not (n.startswith("__") and n.endswith("__")), n
    assert not names & DANGEROUS, names & DANGEROUS


def assert_no_shadowing(tree: ast.Module) -> None:
    """No local name (argument, assignment, loop variable) in any function, and no generated
    function, hides a module name, an imported name or a builtin that the code refers to."""
    imported = {
        a.asname or a.name.split(".")[0]
        for n in tree.body
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assigned = {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    used_builtins = {n for n in loaded if hasattr(builtins, n)}
    assert not defined & (imported | used_builtins | assigned), defined & (
        imported | used_builtins | assigned
    )
    module_names = imported | defined | assigned | used_builtins
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        args = fn.args
        local = {a.arg for a in args.args + args.kwonlyargs + args.posonlyargs}
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
        assert not local & module_names, f"{fn.name}: locals {sorted(local & module_names)} hide module names"


def check_module_shape(source: str, target: str) -> None:
    tree = ast.parse(source)
    mods = imported_modules(tree)
    assert all(
        m in ALLOWED_IMPORTS or m == "toycards.runtime" or m.startswith("toycards.runtime.") for m in mods
    ), mods
    other = {"numpy": "torch", "torch": "numpy"}[target]
    assert other not in mods and target in mods, mods
    assert_definitions_only(tree)
    assert_safe_identifiers(tree)
    assert_no_shadowing(tree)


def execute(source: str) -> dict:
    namespace: dict = {"__name__": "generated_under_test"}
    exec(compile(source, "<generated>", "exec"), namespace)  # noqa: S102 - what the test is about
    return namespace


@pytest.mark.parametrize("target", TARGETS)
def test_library_modules_import_only_their_target(sources, target):
    for name in LIBRARY:
        check_module_shape(sources[name, target], target)


def test_numpy_target_runs_without_torch(tmp_path):
    """The numpy target neither imports torch nor needs it (checked in a fresh interpreter)."""
    script = (
        "import sys\nsys.modules['torch'] = None  # any import of torch now fails\n"
        "from toycards.models.load import load\nfrom toycards.library import library_card\n"
        "m = load(sys.argv[1], target='numpy')\nprint(m.logits([1, 2, 3]).shape)"
    )
    card = tmp_path / "plain.card"
    card.write_text(PLAIN, encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", script, str(card)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "(3, 20)", out.stderr


def test_hostile_card_really_is_hostile(hostile):
    card = parse(hostile)
    main = card.algorithms[-1]
    assert [a.name for a in card.algorithms] == ["TorchModel", "str", "Model"]
    names = {n for d in main.hyper_decls for n in d.names} | {
        n for d, _ in main.all_params() for n in d.names
    }
    assert {"class", "import", EVIL, "NumpyModel_ctx", "CARD_ctx"} <= names, names
    assert '__import__("os")' in hostile and "touch PWNED" in hostile


@pytest.mark.parametrize("target", TARGETS)
def test_hostile_names_only_define_a_module(hostile, tmp_path, monkeypatch, target):
    source = generate_source(parse(hostile), target)
    check_module_shape(source, target)
    monkeypatch.chdir(tmp_path)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        namespace = execute(source)
        model = load(hostile, target=target, seed=3)
        got = model.logits([1, 2, 3, 4, 5])
    assert stdout.getvalue() == stderr.getvalue() == "" and list(tmp_path.iterdir()) == []
    base = {"numpy": "NumpyModel", "torch": "TorchModel"}[target]
    assert namespace[base].__module__.startswith("toycards.runtime.")
    assert issubclass(namespace["Model"], namespace[base])
    generated = [v for v in namespace.values() if getattr(v, "__module__", "") == "generated_under_test"]
    assert len(generated) == 4, generated  # the card's TorchModel and str, the prelude's softmax, Model
    assert "str" not in namespace and "print" not in namespace, "a builtin is shadowed"
    want = load(PLAIN, target=target, seed=3).logits([1, 2, 3, 4, 5])
    np.testing.assert_array_equal(got, want, err_msg="hostile names changed what the card computes")


def _write_card_file(path: Path, general_name: str, arch: str) -> Path:
    """A GGUF that embeds the hostile card (key toycards.card) without its `= value`s, so that its
    hyperparameters come from the file's (hostile) metadata keys, with weights for its parameters."""
    from toycards.models.binding import bind_values

    bound = bind_values(parse(HOSTILE).algorithms[-1])
    unbound = HOSTILE.replace("class ∈ ℕ = 2  from", "class ∈ ℕ  from").replace(
        "import ∈ ℕ = 16  from", "import ∈ ℕ  from"
    )
    assert unbound.count(" = ") == HOSTILE.count(" = ") - 2
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.name", general_name)
    w.add_string("toycards.card", unbound)
    w.add_uint32(f"{arch}.block_count", 2)
    w.add_uint32(f"{arch}.'; import os #", 16)
    rng = np.random.default_rng(0)
    for p in bound.params:
        w.add_tensor(p.tensor, rng.standard_normal(p.stored_shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_metadata_strings_never_become_code(tmp_path):
    """Two files with the same card and different hostile metadata give the same module source."""
    from toycards.gguf.reader import open_gguf

    evil_name = '""" \'); __import__("os").system("touch PWNED") #'
    sources = []
    for i, arch in enumerate(["llama", "x'); print('pwned"]):
        path = _write_card_file(tmp_path / f"m{i}.gguf", evil_name + str(i), arch)
        with contextlib.closing(open_gguf(path)) as f:
            sources.append(generate_source(card_for_file(f), "numpy"))
        model = load(path, target="numpy")
        assert (
            model.hp["import"] == 16 and model.bound.hyper_source["import"] == f'key "{arch}.\'; import os #"'
        )
        assert model.logits([1, 2]).shape == (2, 20)
    assert sources[0] == sources[1]
    assert "x'); print('pwned" not in sources[0] and 'touch PWNED") #0' not in sources[0]
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


# Consecutive products of one input (as Q, K and V of attention are): one `ops.linears` call on the
# torch target, not past a step that assigns the input itself.
PRODUCTS = """toycards 1
▷ products of one input

Algorithm: P ← Net(x | θ)
Input: x ∈ V^ℓ
Output: P ∈ (0,1)^{N_V×ℓ}
Hyperparameters:
  d ∈ ℕ = 16
  N_V ∈ ℕ = 20
Parameters:
  E ∈ ℝ^{d×N_V}  from "token_embd.weight"^⊺
  A ∈ ℝ^{d×d}  from "a.weight"
  B ∈ ℝ^{d×d}  from "b.weight"
  C ∈ ℝ^{d×d}  from "c.weight"
  U ∈ ℝ^{N_V×d}  from "output.weight"
1  ℓ ← length(x)
2  for t ∈ [ℓ]: e_t ← E[:, x[t]]
3  X ← [e_1, …, e_ℓ]  ∷ ℝ^{d×ℓ}
4  Y ← A · X
5  X ← C · X
6  W ← A · X
7  Z ← B · X
8  S ← U · (X + Y + tanh(Z) + W)
9  return P = softmax(S)
"""


def test_products_of_one_input_share_one_call():
    torch_src = generate_source(parse(PRODUCTS), "torch")
    assert re.search(r"# 6  W ← A · X\n *# 7  Z ← B · X\n *W, Z = ops\.linears\(X, ", torch_src)
    assert "Y = ops.linear(X, " in torch_src and "X = ops.linear(X, " in torch_src  # 5 assigns X: not with 4
    assert "ops.linears" not in generate_source(parse(PRODUCTS), "numpy")
    ids = [3, 1, 4, 1, 5, 9, 2]
    np.testing.assert_allclose(
        load(PRODUCTS, target="torch", seed=3).logits(ids), load(PRODUCTS, target="numpy", seed=3).logits(ids),
        rtol=1e-5, atol=1e-6,
    )  # fmt: skip
