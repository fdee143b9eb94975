#!/usr/bin/env python3
"""cuBLAS (PyTorch) on the matmul shapes of matmul.yaml, or with the argument `tf32` those of
matmul_tf32.yaml (f32 operands, torch.backends.cuda.matmul.allow_tf32 on), timed with CUDA
events: the median of 50 runs after 10 warm-ups, on random inputs. One JSON line per shape."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "device"))
from torch_peers import time_ms  # noqa: E402

SHAPES = [("f16", 4096, 4096, 4096, False), ("bf16", 4096, 4096, 4096, False), ("f16", 4096, 14336, 4096, False),
          ("bf16", 4096, 14336, 4096, False), ("bf16", 4096, 14336, 4096, True)]
TF32_SHAPES = [("tf32", 4096, 4096, 4096, False), ("tf32", 4096, 14336, 4096, False), ("tf32", 4096, 14336, 4096, True)]
tf32 = sys.argv[1:] == ["tf32"]
torch.backends.cuda.matmul.allow_tf32 = tf32
for name, m, n, k, tb in TF32_SHAPES if tf32 else SHAPES:
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[name]
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt) if tb else torch.randn(k, n, device="cuda", dtype=dt)
    f = (lambda: a @ b.t()) if tb else (lambda: a @ b)
    ms = time_ms(f, reps=50, warmup=10)
    print(json.dumps({"peer": "cublas", "dtype": name, "m": m, "n": n, "k": k, "trans_b": tb, "ms": round(ms, 4),
                      "tflops": round(2 * m * n * k / ms / 1e9, 1)}))
