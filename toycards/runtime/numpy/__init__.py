"""What generated NumPy modules run on: their ops (ops.py) and model base (model.py)."""
