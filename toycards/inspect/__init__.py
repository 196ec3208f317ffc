"""Looking into GGUF files and cards: describe, header, inventory, formats, diff, discover."""
