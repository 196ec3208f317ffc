"""What generated torch modules run on: their ops (ops.py), RoPE angles (rope.py) and model base
(model.py)."""
