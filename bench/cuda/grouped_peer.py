#!/usr/bin/env python3
"""PyTorch's peers for grouped_matmul.yaml, timed with CUDA events (median of 30 runs after 5
warm-ups): torch._grouped_mm (CUTLASS grouped GEMM on Hopper) where this PyTorch has it, and
cuBLAS on the dense product of the same FLOPs (one [m, k] x [k, n] GEMM, or for tgmm the batched
[groups, k, m/groups] x [groups, m/groups, n]). Groups of equal size. One JSON line a shape."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "device"))
from torch_peers import time_ms  # noqa: E402

SHAPES = [("gmm", 16384, 4096, 14336, 8, False), ("gmm", 16384, 4096, 14336, 8, True),
          ("gmm", 16384, 2048, 1408, 64, False), ("tgmm", 16384, 4096, 4096, 8, False),
          ("tgmm", 16384, 2048, 1408, 64, False)]
dt = torch.bfloat16
for mode, m, k, n, g, trans in SHAPES:
    flops = 2 * m * k * n
    offs = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * (m // g)
    row = {"mode": mode, "m": m, "k": k, "n": n, "groups": g, "trans_rhs": trans}
    if mode == "gmm":
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(g, n, k, device="cuda", dtype=dt).transpose(1, 2) if trans else torch.randn(g, k, n, device="cuda", dtype=dt)
        grouped = lambda: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
        w = torch.randn(k, n, device="cuda", dtype=dt)
        dense = lambda: a @ w  # noqa: E731
    else:
        a = torch.randn(m, k, device="cuda", dtype=dt)
        d = torch.randn(m, n, device="cuda", dtype=dt)
        grouped = lambda: torch._grouped_mm(a.t(), d, offs=offs)  # noqa: E731
        at = a.view(g, m // g, k).transpose(1, 2)
        dv = d.view(g, m // g, n)
        dense = lambda: torch.bmm(at, dv)  # noqa: E731
    for name, fn in (("torch_grouped_mm", grouped), ("cublas_dense", dense)):
        try:
            ms = time_ms(fn)
            row[name] = {"ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1)}
        except Exception as e:  # noqa: BLE001
            row[name] = {"error": str(e)[:200]}
    print(json.dumps(row), flush=True)
