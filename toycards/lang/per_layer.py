"""Per-layer hyperparameters: `n_kv ∈ ℕ^{L} from "{arch}.attention.head_count_kv"`.

Owns: `is_per_layer`, the one rule the checker, the binder, the code generators and describe ask
(which hyperparameters hold one number per layer), and `layer_entries`, how a file's value becomes
those numbers (llama.cpp's get_key_or_arr: an array of L entries, or one number for every layer).
Leaves out: converting each entry (models/binding.py) and reading `n_kv[l]` (each stage's own).

>>> layer_entries(8, 3, "n_kv"), layer_entries([0, 8, 0], 3, "n_kv")
([8, 8, 8], [0, 8, 0])
"""

from __future__ import annotations

from toycards.lang.ir import Decl, TensorType


def is_per_layer(decl: Decl) -> bool:
    """A vector of numbers read from the file (`n_kv ∈ ℕ^{L} from …`, `m ∈ {0,1}^{L} ≔ present(…, L)`)
    or given as a value (`= [0, 8, 0]`), not a vector a caller passes."""
    t = decl.type
    bound = decl.value is not None or (decl.binding is not None and decl.binding.kind in ("from", "derived"))
    return isinstance(t, TensorType) and len(t.dims) == 1 and t.field in ("N", "Z", "R", "B") and bound


def layer_entries(value: object, n: int, name: str, length: str = "L") -> list:
    """The `n` entries of a per-layer value: an array of n, or one number repeated; raises
    ValueError with a one-line message for an array of another length."""
    if hasattr(value, "tolist"):  # a NumPy array or scalar
        value = value.tolist()
    if not isinstance(value, list | tuple):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries, but {length} = {n} layers")
    return list(value)
