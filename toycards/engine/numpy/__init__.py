"""The NumPy target's kernels, as its ops (runtime/numpy/ops.py) call them: weights kept in their
blocks (`QuantWeight`, quant.py) and stacks of them (`QuantStack`, stack.py: `W[e]` is a
QuantWeight), the float products (`blas_product`; `float_linear`, None where the
C product does not apply) and grouped-query attention in C (`gq_attention`, glue.py; None where it
does not apply)."""

from toycards.engine.numpy.glue import gq_attention, gq_attention_rows
from toycards.engine.numpy.quant import QuantWeight, blas_product, float_linear
from toycards.engine.numpy.stack import QuantStack

__all__ = ["QuantWeight", "QuantStack", "blas_product", "float_linear", "gq_attention", "gq_attention_rows"]
