"""The card language: IR, names, grammar, parser, canonical printer."""
