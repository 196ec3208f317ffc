"""Write llama.cpp's logits for token ids to a .npy file.

Usage: python llama_cpp_logits.py MODEL.gguf '[ids…]' OUT.npy — run by an interpreter that has
llama-cpp-python (a benchmark dependency, never a test or CI one), in its own process. The KV
cache is float32 (type_k = type_v = 0) so that the comparison with float32 math is tight; by
default llama.cpp keeps it in float16.
"""

import json
import sys

import numpy as np
from llama_cpp import Llama

m = Llama(model_path=sys.argv[1], n_ctx=64, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0)
ids = json.loads(sys.argv[2])
m.eval(ids)
np.save(sys.argv[3], np.asarray(m.scores[: len(ids)], dtype=np.float32))
