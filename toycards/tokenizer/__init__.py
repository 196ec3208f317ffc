"""Tokenizers read from GGUF metadata: byte-level BPE, SentencePiece, special tokens, chat templates."""
