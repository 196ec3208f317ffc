"""Write llama.cpp's embeddings of token ids to a .npy file.

Usage: python llama_cpp_embeddings.py MODEL.gguf '[ids…]' OUT.npy — run by an interpreter that has
llama-cpp-python (a benchmark dependency, never a test or CI one), in its own process. The pooling
is the file's own (`{arch}.pooling_type`): one vector for a pooled model, else one per token. Not
normalised.
"""

import json
import sys

import llama_cpp
import numpy as np
from llama_cpp import Llama

m = Llama(model_path=sys.argv[1], n_ctx=64, embedding=True, verbose=False, n_threads=2)
ids = json.loads(sys.argv[2])
m._batch.reset()
m._batch.add_sequence(ids, 0, True)
m._ctx.decode(m._batch)
n = m.n_embd()
if m.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE:
    ptr = llama_cpp.llama_get_embeddings(m._ctx.ctx)
    out = np.array([ptr[j * n : (j + 1) * n] for j in range(len(ids))], dtype=np.float32)
else:
    out = np.array(llama_cpp.llama_get_embeddings_seq(m._ctx.ctx, 0)[:n], dtype=np.float32)
np.save(sys.argv[3], out)
