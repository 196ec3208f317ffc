"""The maps the project draws of itself are true, and it holds no dead code.

- Every file path named in the package's sources (docstrings and comments), its grammar and C
  sources, and the docs (`gguf/reader.py`, `toycards/engine/kernels/glue.cpp`) exists: relative to
  the repository, the package, the tests, or the folder of the file that names it (or one above).
- Every file a module's docstring names by its bare name (`Leaves out: … (frames.py)`) exists
  somewhere in the repository.
- Every top-level function and class of the package is used: its name occurs somewhere other
  than its own definition (in the package, the tests, the benchmarks, the scripts or the docs; the
  code generators write the runtime's names as text, which counts).
Placeholders (`ARCH.card`), a C compiler's own headers (`#include <sys/mman.h>`) and names of other
projects (llama.cpp) are not paths of this one.
"""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toycards"
SUFFIXES = ("py", "card", "lark", "md", "c", "cpp", "h", "jinja", "toml")
PATH = re.compile(rf"(?<![\w./<-])((?:[\w.-]+/)+[\w.-]+\.(?:{'|'.join(SUFFIXES)}))(?![\w/])")
BARE = re.compile(r"(?<![\w./<-])(\w+\.(?:py|card|lark|jinja|cpp|c))(?![\w/])")
ELSEWHERE = {"llama.cpp", "toycards.card"}  # another project; a GGUF metadata key
FOLDERS = ("toycards", "tests", "bench", "scripts", "examples", "docs", ".ci")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _placeholder(name: str) -> bool:
    stem = name.rsplit("/", 1)[-1].split(".")[0]
    return stem.isupper()


def _sources() -> list[Path]:
    kinds = ("*.py", "*.lark", "*.c", "*.cpp", "*.h", "*.jinja")
    found = [p for kind in kinds for p in PACKAGE.rglob(kind)]
    return sorted(found) + sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


def _exists(named: str, where: Path) -> bool:
    bases = [ROOT, PACKAGE, ROOT / "tests", where, *where.parents]
    return any((base / named).exists() for base in bases)


def test_every_path_the_project_names_exists():
    missing = []
    for source in _sources():
        text = _text(source)
        if source.suffix in (".c", ".cpp", ".h"):
            text = re.sub(r"#include <[^>]*>", "", text)
        for m in PATH.finditer(text):
            named = m.group(1)
            if not _placeholder(named) and not _exists(named, source.parent):
                missing.append(f"{source.relative_to(ROOT)}: {named}")
    assert not missing, "paths named that do not exist:\n" + "\n".join(missing)


def test_every_file_a_module_docstring_names_exists():
    names = {p.name for folder in FOLDERS for p in (ROOT / folder).rglob("*")}
    missing = []
    for module in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(_text(module))) or ""
        for m in BARE.finditer(doc):
            named = m.group(1)
            if named not in names and named not in ELSEWHERE and not _placeholder(named):
                missing.append(f"{module.relative_to(ROOT)}: {named}")
    assert not missing, "files named in module docstrings that do not exist:\n" + "\n".join(missing)


def test_every_top_level_function_and_class_is_used():
    kinds = (".py", ".jinja", ".md", ".card", ".c", ".cpp")
    files = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*") if p.suffix in kinds]
    words = collections.Counter(w for p in files for w in re.findall(r"\w+", _text(p)))
    unused = []
    for module in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(_text(module)).body:
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and words[node.name] <= 1
            ):
                unused.append(f"{module.relative_to(ROOT)}: {node.name}")
    assert not unused, "defined and never used:\n" + "\n".join(unused)


def test_the_checks_find_what_they_look_for(tmp_path):
    """The patterns see a stale path, a stale bare name and skip what is not a path of ours."""
    text = "Leaves out: reading (runtime/gguf.py), the tokens (tokenizer_bpe.py); see llama.cpp, ARCH.card"
    assert [m.group(1) for m in PATH.finditer(text)] == ["runtime/gguf.py"]
    assert not _exists("runtime/gguf.py", PACKAGE / "gguf")
    assert _exists("gguf/reader.py", PACKAGE / "gguf")
    bare = [m.group(1) for m in BARE.finditer(text)]
    assert bare == ["tokenizer_bpe.py", "llama.cpp", "ARCH.card"]
    assert [n for n in bare if n not in ELSEWHERE and not _placeholder(n)] == ["tokenizer_bpe.py"]
