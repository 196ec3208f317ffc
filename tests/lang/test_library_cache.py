"""Library cards are cached on disk between processes, keyed by their text and the grammar."""

from __future__ import annotations

import toycards.library as library
from toycards.library import parse_library_card


def test_cache_round_trip_and_invalidation(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path))
    library.library_card.cache_clear()
    first = library.library_card("llama")
    assert first == parse_library_card("llama") and first.source
    files = list(tmp_path.glob("llama-*.pickle"))
    assert len(files) == 1

    # a second process reads the cache instead of parsing
    library.library_card.cache_clear()
    monkeypatch.setattr(
        library, "parse_library_card", lambda name: (_ for _ in ()).throw(AssertionError("parsed"))
    )
    again = library.library_card("llama")
    assert again == first and again.source == first.source and again.main.span == first.main.span

    # a damaged cache file is ignored and rewritten
    files[0].write_bytes(b"not a pickle")
    library.library_card.cache_clear()
    monkeypatch.setattr(library, "parse_library_card", parse_library_card)
    assert library.library_card("llama") == first
    library.library_card.cache_clear()


def test_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYCARDS_CACHE", "off")
    library.library_card.cache_clear()
    assert library.library_card("gpt2").main.name == "GPT2"
    assert not list(tmp_path.iterdir())
    library.library_card.cache_clear()


def test_cache_key_follows_the_ir_and_parser(tmp_path, monkeypatch):
    """A pickled card from before a change to any toycards/lang source (IR, parser) is not reused."""
    monkeypatch.setenv("TOYCARDS_CACHE", str(tmp_path))
    library.library_card.cache_clear()
    library.library_card("gpt2")
    real = library.LANG
    fake = tmp_path / "lang"
    fake.mkdir()
    for src in [*real.glob("*.py"), real / "card.lark"]:
        (fake / src.name).write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(library, "LANG", fake)
    library.library_card.cache_clear()
    library.library_card("gpt2")
    assert len(list(tmp_path.glob("gpt2-*.pickle"))) == 1  # same sources: the same entry
    (fake / "ir.py").write_text(
        (real / "ir.py").read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8"
    )
    library.library_card.cache_clear()
    library.library_card("gpt2")
    assert len(list(tmp_path.glob("gpt2-*.pickle"))) == 2  # a new key, parsed afresh
    library.library_card.cache_clear()
