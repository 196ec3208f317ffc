"""The package version: one home, read by pyproject.toml, the CLI and the card cache key."""

__version__ = "0.1.0"
