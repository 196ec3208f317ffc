"""GGUF files: header validation, the reader, ggml facts, dequantisation, metadata checks."""
