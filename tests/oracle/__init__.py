"""Independent oracles for the test suite (see `hf_gguf` for the Hugging Face ↔ GGUF one)."""
