"""Numbers from a GGUF file written as card literals.

Owns: `number_expr(value, float32)`, the card literal for a metadata number; a float32 value is
written with the fewest digits that read back to the same float32 (1e-05, not
9.999999747378752e-06), so bound cards read like hand-written ones and parse back exactly.
Leaves out: which values a card shows (describe.py, inventory.py).
"""

from __future__ import annotations

import math
import struct

from toycards.lang import ir


def number_expr(value: float | int | bool, float32: bool = False) -> ir.Expr:
    """A card literal for a number; float32 metadata is written with the fewest digits that
    read back to the same float32.

    >>> number_expr(9.999999747378752e-06, float32=True), number_expr(-3)
    (Num(text='1e-05'), UnOp(op='-', operand=Num(text='3')))
    """
    if hasattr(value, "item"):  # a NumPy scalar from an array
        value = value.item()
    if isinstance(value, bool):
        return ir.Num("1" if value else "0")
    if isinstance(value, int):
        text = str(abs(value))
    else:
        v = abs(float(value))
        text = _shortest_float32(v) if float32 and round_float32(v) == v else repr(v)
    return ir.UnOp("-", ir.Num(text)) if value < 0 else ir.Num(text)


def round_float32(x: float) -> float:
    """`x` rounded to the nearest float32, as GGUF stores it (±inf beyond its range)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _shortest_float32(x: float) -> str:
    """The fewest significant digits that read back as the float32 `x`: 9.99…7e-06 → '1e-05'."""
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if round_float32(float(text)) == x:
            return repr(float(text))
    return repr(x)
