"""Find GGUF files in the usual local places and summarise each (`toycards list`).

Owns: where GGUF files live on a user's machine and how each store names them, and a
one-line summary of each file read from its header:

    source    location (first that applies)                         layout and display name
    folder    the given folders, else the current one               *.gguf (recursive on request)
                                                                    → path relative to the folder
    hf        $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,  models--ORG--NAME/snapshots/REV/
              $XDG_CACHE_HOME/huggingface/hub,                      **/*.gguf, links into blobs/
              ~/.cache/huggingface/hub                              → "ORG/NAME/FILE"
    ollama    $OLLAMA_MODELS, else ~/.ollama/models and             manifests/HOST/NAMESPACE/MODEL/TAG
              /usr/share/ollama/.ollama/models (Linux service)      (JSON); its layer of media type
                                                                    application/vnd.ollama.image.model
                                                                    names blobs/sha256-HEX
                                                                    → "MODEL:TAG" as `ollama list`
                                                                    shows it (library/ dropped)
    lmstudio  $LMSTUDIO_MODELS, else ~/.lmstudio/models and         PUBLISHER/REPO/*.gguf
              ~/.cache/lm-studio/models (before LM Studio 0.3)      → "PUBLISHER/REPO/FILE"

Every location can be replaced by an explicit argument. One file reached several ways (two
HF revisions sharing a blob, two Ollama tags, a folder inside a cache) is listed once, under
the first of hf, ollama, lmstudio, folder (in HF, the revision that refs/main names), with
the other names as `aliases`. Walks are bounded in depth and in folders visited, visit each
folder once (so symlink loops end), and skip hidden folders in the folder source.
Also owns finding a model by the name `toycards list` shows (`find_named`, with `near_names` for
a name that matches none): the name itself or an alias, an Ollama name as `ollama run` takes it
(`smollm2` is `smollm2:latest`; `library/` and `registry.ollama.ai/` may be written), and, where
exactly one file matches, a name in other letter case.
Leaves out: parsing GGUF (gguf/reader.py, via `open_gguf`), printing (cli/), downloading.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from toycards.errors import ToycardsError
from toycards.gguf.facts import Keys, file_type_name

__all__ = [
    "Entry",
    "Found",
    "find_gguf_files",
    "find_named",
    "has_gguf_magic",
    "list_gguf",
    "locations",
    "near_names",
    "summarise",
]

SOURCES = ("hf", "ollama", "lmstudio", "folder")  # priority order for duplicates and sorting
GGUF_MAGIC = b"GGUF"  # gguf.GGUF_MAGIC (0x46554747) as the file's first four bytes
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY, OLLAMA_NAMESPACE = "registry.ollama.ai", "library"  # elided in display names
OLLAMA_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})", re.IGNORECASE)
MAX_DEPTH = {"folder": 6, "hf": 4, "lmstudio": 4}  # folder levels below each root
MAX_FOLDERS = 20_000  # folders visited per root, to bound the time of one listing
MAX_MANIFEST_BYTES = 1 << 20  # an Ollama manifest is a few hundred bytes of JSON

PathArg = str | os.PathLike | Sequence[str | os.PathLike] | None


@dataclass(frozen=True)
class Found:
    """One GGUF file and how its store names it."""

    path: str  # the path to open; in the HF cache, the snapshot link (it names the revision)
    source: str  # one of SOURCES
    name: str  # display name, see the module docstring
    size: int  # bytes of the file itself (links followed)
    aliases: tuple[str, ...] = ()  # other names of the same file (tags, revisions, sources)


@dataclass
class Entry:
    """A `Found` plus a summary of its GGUF header; `error` says why the rest is missing."""

    path: str
    source: str
    name: str
    size: int
    aliases: tuple[str, ...] = ()
    architecture: str | None = None  # general.architecture
    model_name: str | None = None  # general.name
    file_type: str | None = None  # general.file_type as llama.cpp names it, e.g. "Q4_K_M"
    n_tensors: int | None = None
    n_params: int | None = None  # elements of all tensors in this file (one shard if split)
    tensor_types: dict[str, int] = field(default_factory=dict)  # ggml type name → tensor count
    split: str | None = None  # "2/3" for the second of three shards (split.no + 1 / split.count)
    error: str | None = None


# ---- locations -------------------------------------------------------------------------------


def _paths(arg: PathArg) -> list[Path] | None:
    if arg is None:
        return None
    if isinstance(arg, (str, os.PathLike)):
        return [Path(arg).expanduser()]
    return [Path(p).expanduser() for p in arg]


def _env_path(env: dict[str, str], name: str, *below: str) -> Path | None:
    value = env.get(name)
    return Path(value, *below).expanduser() if value else None


def _default_hf(env: dict[str, str], home: Path) -> list[Path]:
    """huggingface_hub's precedence: the first variable that is set wins."""
    for name, below in [
        ("HF_HUB_CACHE", ()),
        ("HUGGINGFACE_HUB_CACHE", ()),
        ("HF_HOME", ("hub",)),
        ("XDG_CACHE_HOME", ("huggingface", "hub")),
    ]:
        path = _env_path(env, name, *below)
        if path is not None:
            return [path]
    return [home / ".cache" / "huggingface" / "hub"]


def _default_ollama(env: dict[str, str], home: Path) -> list[Path]:
    path = _env_path(env, "OLLAMA_MODELS")
    return [path] if path else [home / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def _default_lmstudio(env: dict[str, str], home: Path) -> list[Path]:
    path = _env_path(env, "LMSTUDIO_MODELS")
    return [path] if path else [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def locations(
    dirs: PathArg = None, hf_cache: PathArg = None, ollama: PathArg = None, lmstudio: PathArg = None
) -> dict[str, list[Path]]:
    """Where each source will be searched: explicit arguments, else environment, else defaults.

    An argument replaces that source's defaults; an empty list turns the source off.

    >>> locations(dirs=".", hf_cache=[], ollama="/m", lmstudio=[])
    {'hf': [], 'ollama': [PosixPath('/m')], 'lmstudio': [], 'folder': [PosixPath('.')]}
    """
    env, home = dict(os.environ), Path.home()
    chosen = {"hf": _paths(hf_cache), "ollama": _paths(ollama), "lmstudio": _paths(lmstudio)}
    defaults = {"hf": _default_hf, "ollama": _default_ollama, "lmstudio": _default_lmstudio}
    out = {src: paths if paths is not None else defaults[src](env, home) for src, paths in chosen.items()}
    out["folder"] = _paths(dirs) if dirs is not None else [Path.cwd()]
    return out


def _check_explicit(source: str, paths: list[Path] | None) -> None:
    for path in paths or []:
        if not path.exists():
            raise ToycardsError(f"{source} location {path} does not exist")
        if source != "folder" and not path.is_dir():
            raise ToycardsError(f"{source} location {path} is not a folder")


# ---- walking ---------------------------------------------------------------------------------


def _walk_gguf(root: Path, max_depth: int, skip_hidden: bool = False) -> Iterator[Path]:
    """*.gguf files at most `max_depth` folders below `root`; each folder is visited once."""
    stack, seen = [(root, 0)], set()
    while stack and len(seen) < MAX_FOLDERS:
        folder, depth = stack.pop()
        try:
            st = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        for e in entries:
            if skip_hidden and e.name.startswith("."):
                continue
            try:
                if e.is_dir():
                    if depth < max_depth:
                        stack.append((Path(e.path), depth + 1))
                elif e.name.lower().endswith(".gguf") and e.is_file():
                    yield Path(e.path)
            except OSError:
                continue


def has_gguf_magic(path: str | os.PathLike) -> bool:
    """Whether `path` is a file that starts with the GGUF magic (whatever its name: Ollama's blobs
    are `sha256-HEX`)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _folder(root: Path, recursive: bool) -> Iterator[tuple[Path, str, int]]:
    if root.is_file():
        yield root, root.name, 0
        return
    depth = MAX_DEPTH["folder"] if recursive else 0
    for path in _walk_gguf(root, depth, skip_hidden=True):
        yield path, path.relative_to(root).as_posix(), 0


def _hf(root: Path) -> Iterator[tuple[Path, str, int]]:
    """models--ORG--NAME/snapshots/REV/**.gguf → "ORG/NAME/FILE", refs/main's revision first."""
    for repo_dir in sorted(root.glob("models--*")):
        repo_id = repo_dir.name.removeprefix("models--").replace("--", "/")
        try:
            main = (repo_dir / "refs" / "main").read_text().strip()
        except OSError:
            main = ""
        for snapshot in sorted((repo_dir / "snapshots").glob("*")):
            for path in _walk_gguf(snapshot, MAX_DEPTH["hf"]):
                yield path, f"{repo_id}/{path.relative_to(snapshot).as_posix()}", int(snapshot.name != main)


def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name `ollama list` shows for a manifest path.

    >>> _ollama_name("registry.ollama.ai", "library", "llama3.2", "1b")
    'llama3.2:1b'
    >>> _ollama_name("hf.co", "bartowski", "SmolLM2-GGUF", "Q4_K_M")
    'hf.co/bartowski/SmolLM2-GGUF:Q4_K_M'
    """
    if host != OLLAMA_REGISTRY:
        return f"{host}/{namespace}/{model}:{tag}"
    return f"{model}:{tag}" if namespace == OLLAMA_NAMESPACE else f"{namespace}/{model}:{tag}"


def _ollama_model_digests(manifest: Path) -> list[str]:
    """Hex digests of a manifest's model layers; [] for anything that is not such a manifest."""
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return []
        layers = json.loads(manifest.read_bytes()).get("layers", [])
        digests = [
            layer.get("digest", "") for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER
        ]
    except (OSError, ValueError, AttributeError):
        return []
    return [m.group(1).lower() for d in digests if isinstance(d, str) and (m := OLLAMA_DIGEST.fullmatch(d))]


def _ollama(root: Path) -> Iterator[tuple[Path, str, int]]:
    """manifests/HOST/NAMESPACE/MODEL/TAG → blobs/sha256-HEX (sha256:HEX before Ollama 0.1.3x)."""
    for manifest in sorted((root / "manifests").glob("*/*/*/*")):
        host, namespace, model, tag = manifest.relative_to(root / "manifests").parts
        for hex_digest in _ollama_model_digests(manifest):
            blobs = [root / "blobs" / f"sha256{sep}{hex_digest}" for sep in "-:"]
            blob = next((b for b in blobs if b.is_file()), None)
            if blob is not None and has_gguf_magic(blob):  # older stores hold GGML-era weights too
                yield blob, _ollama_name(host, namespace, model, tag), 0


def _lmstudio(root: Path) -> Iterator[tuple[Path, str, int]]:
    for path in _walk_gguf(root, MAX_DEPTH["lmstudio"], skip_hidden=True):
        yield path, path.relative_to(root).as_posix(), 0


# ---- finding ---------------------------------------------------------------------------------


def _dedupe(candidates: Iterable[tuple[str, Path, str, int]]) -> list[Found]:
    """One Found per file (device, inode); the best-ranked sighting names it, the rest are aliases."""
    groups: dict[tuple[int, int], list[tuple[tuple, str, Path, str, int]]] = {}
    for source, path, name, rank in candidates:
        try:
            st = path.stat()
        except OSError:  # a broken link or a file that vanished while we looked
            continue
        key = (SOURCES.index(source), rank, name, str(path))
        groups.setdefault((st.st_dev, st.st_ino), []).append((key, source, path, name, st.st_size))
    found = []
    for sightings in groups.values():
        sightings.sort()
        (_, rank, _, _), source, path, name, size = sightings[0]
        aliases = tuple(dict.fromkeys(n for _, _, _, n, _ in sightings[1:] if n != name))
        found.append((rank, Found(str(path), source, name, size, aliases)))
    # one name for two files (two HF revisions): the better-ranked first, the one a name finds
    found.sort(
        key=lambda rf: (SOURCES.index(rf[1].source), rf[1].name.casefold(), rf[1].name, rf[0], rf[1].path)
    )
    return [f for _, f in found]


def find_gguf_files(
    dirs: PathArg = None,
    hf_cache: PathArg = None,
    ollama: PathArg = None,
    lmstudio: PathArg = None,
    recursive: bool = False,
) -> list[Found]:
    """GGUF files in folders and local model caches, one entry per file, sorted by source then name.

    Each argument is a path or a list of paths that replaces that source's usual locations
    (see `locations`); `[]` skips the source. `dirs` defaults to the current folder and may
    also name single files; `recursive` descends into its sub-folders (up to 6 levels, hidden
    ones skipped). A location passed explicitly must exist; usual ones that do not are skipped.
    """
    for source, arg in [("folder", dirs), ("hf", hf_cache), ("ollama", ollama), ("lmstudio", lmstudio)]:
        _check_explicit(source, _paths(arg))
    where = locations(dirs, hf_cache, ollama, lmstudio)
    walkers = {
        "hf": _hf,
        "ollama": _ollama,
        "lmstudio": _lmstudio,
        "folder": lambda root: _folder(root, recursive),
    }

    def candidates() -> Iterator[tuple[str, Path, str, int]]:
        for source in SOURCES:
            for root in where[source]:
                if root.exists():
                    for path, name, rank in walkers[source](root):
                        yield source, path, name, rank

    return _dedupe(candidates())


# ---- summaries -------------------------------------------------------------------------------


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _file_type(value: object) -> str | None:
    """general.file_type as llama.cpp names it: 15 → "Q4_K_M"."""
    code = _int(value)
    if code is None:
        return None
    return file_type_name(code) or f"unknown ({code})"


def _header_summary(gf) -> dict:
    """The Entry fields that come from an open GGUFFile."""
    tensors = list(gf.tensors.values())
    n_split, split_no = (
        _int(gf.get(Keys.Split.LLM_KV_SPLIT_COUNT)),
        _int(gf.get(Keys.Split.LLM_KV_SPLIT_NO)),
    )
    types = Counter(t.type_name for t in tensors)
    return {
        "architecture": _text(gf.get(Keys.General.ARCHITECTURE)),
        "model_name": _text(gf.get(Keys.General.NAME)),
        "file_type": _file_type(gf.get(Keys.General.FILE_TYPE)),
        "n_tensors": len(tensors),
        "n_params": sum(int(t.n_elements) for t in tensors),
        "tensor_types": dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
        "split": f"{(split_no or 0) + 1}/{n_split}" if n_split and n_split > 1 else None,
    }


def summarise(found: Found) -> Entry:
    """Read `found`'s header; a file that cannot be read gives an Entry with `error` set.

    Never raises for a bad file, so that one broken download cannot stop a listing.
    """
    from toycards.gguf.reader import open_gguf  # runtime is heavier than listing folders

    entry = Entry(**asdict(found))
    try:
        with open_gguf(found.path) as gf:  # checks the magic, the version and the tables
            summary = _header_summary(gf)
    except ToycardsError as e:
        entry.error = str(e)
    except OSError as e:
        entry.error = f"{found.path}: cannot read: {e.strerror or e}"
    except Exception as e:  # a reader bug must not hide the other files; show it instead
        entry.error = f"{found.path}: unexpected {type(e).__name__} while reading the header: {e}"
    else:
        for key, value in summary.items():
            setattr(entry, key, value)
    return entry


def list_gguf(
    dirs: PathArg = None,
    hf_cache: PathArg = None,
    ollama: PathArg = None,
    lmstudio: PathArg = None,
    recursive: bool = False,
) -> list[Entry]:
    """`find_gguf_files` then `summarise` each: the whole of `toycards list`."""
    return [summarise(f) for f in find_gguf_files(dirs, hf_cache, ollama, lmstudio, recursive)]


# ---- names -----------------------------------------------------------------------------------


def _ollama_spelling(name: str) -> str | None:
    """The name `ollama list` shows for a name as `ollama run` takes it, or None where it is not one.

    >>> _ollama_spelling("smollm2"), _ollama_spelling("registry.ollama.ai/library/smollm2:135m")
    ('smollm2:latest', 'smollm2:135m')
    >>> _ollama_spelling("hf.co/bartowski/SmolLM2-GGUF:Q4_K_M"), _ollama_spelling("a/b/c/d")
    ('hf.co/bartowski/SmolLM2-GGUF:Q4_K_M', None)
    """
    path, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
    parts = path.split("/")
    if not tag or not all(parts) or len(parts) > 3:
        return None
    host, namespace = OLLAMA_REGISTRY, OLLAMA_NAMESPACE
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return _ollama_name(host, namespace, parts[-1], tag)


def _names(f: Found) -> tuple[str, ...]:
    return (f.name, *f.aliases)


def find_named(name: str, found: Sequence[Found]) -> Found | None:
    """The file of `found` (a `find_gguf_files` result) that `name` names (see the module
    docstring), or None.

    >>> f = Found("/m/blobs/sha256-ab", "ollama", "smollm2:latest", 1)
    >>> find_named("smollm2", [f]) is f, find_named("SmolLM2:latest", [f]) is f, find_named("smol", [f])
    (True, True, None)
    """
    exact = [f for f in found if name in _names(f)]
    ollama = _ollama_spelling(name)
    if not exact and ollama is not None:
        exact = [f for f in found if f.source == "ollama" and ollama in _names(f)]
    if exact:
        return exact[0]
    folded = {name.casefold(), (ollama or name).casefold()}
    anycase = [f for f in found if folded & {n.casefold() for n in _names(f)}]
    return anycase[0] if len(anycase) == 1 else None


def near_names(name: str, found: Sequence[Found], n: int = 3) -> list[str]:
    """Up to `n` names of `found` close to `name`: those that contain it or are the same model
    with another tag, then difflib's closest.

    >>> found = [Found("a", "ollama", "smollm2:135m", 1), Found("b", "hf", "x/y/z.gguf", 1)]
    >>> near_names("smollm2", found), near_names("smollm2:latest", found), near_names("q", found)
    (['smollm2:135m'], ['smollm2:135m'], [])
    """
    import difflib

    names = list(dict.fromkeys(m for f in found for m in _names(f)))
    folded, model = name.casefold(), name.split(":")[0].casefold()
    containing = [m for m in names if folded in m.casefold() or m.split(":")[0].casefold() == model]
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    return list(dict.fromkeys(containing + close))[:n]
