#!/usr/bin/env python3
"""cuBLAS (PyTorch) on the matmul shapes of matmul.yaml, timed with CUDA events: the median of
50 runs after 10 warm-ups, on random inputs. One JSON line per shape."""
import json
import torch

SHAPES = [("f16", 4096, 4096, 4096, False), ("bf16", 4096, 4096, 4096, False), ("f16", 4096, 14336, 4096, False),
          ("bf16", 4096, 14336, 4096, False), ("bf16", 4096, 14336, 4096, True)]
for name, m, n, k, tb in SHAPES:
    dt = torch.float16 if name == "f16" else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt) if tb else torch.randn(k, n, device="cuda", dtype=dt)
    f = (lambda: a @ b.t()) if tb else (lambda: a @ b)
    for _ in range(10):
        f()
    times = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    ms = sorted(times)[len(times) // 2]
    print(json.dumps({"peer": "cublas", "dtype": name, "m": m, "n": n, "k": k, "trans_b": tb, "ms": round(ms, 4),
                      "tflops": round(2 * m * n * k / ms / 1e9, 1)}))
