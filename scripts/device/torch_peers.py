#!/usr/bin/env python3
"""Peers measured on the GPU machine in the same run as ejk's benchmarks: cuBLAS GEMM through
torch.matmul and scaled_dot_product_attention (FlashAttention-2 and cuDNN backends), timed with
CUDA events (median of repetitions). Prints JSON."""
import json
import statistics

import torch


def time_ms(fn, reps=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype in (torch.float32, torch.float16):
        for n in (1024, 2048, 4096):
            a = torch.rand(n, n, device="cuda", dtype=dtype) - 0.5
            b = torch.rand(n, n, device="cuda", dtype=dtype) - 0.5
            ms = time_ms(lambda: a @ b)
            out["rows"].append({"what": f"cublas_gemm_{str(dtype)[6:]}_{n}", "ms": ms, "TFLOP/s": 2 * n**3 / ms / 1e9})
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    for D, causal in ((128, False), (128, True), (64, False)):
        B, H, S = 4, 16, 4096
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        shape = f"B{B}H{H}S{S}D{D}{'_causal' if causal else ''}"
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(be):
                ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            out["rows"].append({"what": f"sdpa_{name}_{shape}", "ms": ms, "TFLOP/s": flops / ms / 1e9})
            # Backward alone: the graph of one forward, differentiated repeatedly (2.5x the flops).
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            dout = torch.randn_like(o)
            with sdpa_kernel(be):
                ms = time_ms(lambda: torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True))
            out["rows"].append({"what": f"sdpa_{name}_bwd_{shape}", "ms": ms, "TFLOP/s": 2.5 * flops / ms / 1e9})
    # Decode over a KV cache: batch 32, 32 query heads, 8 KV heads, context 4096, head_dim 128, one
    # query token per sequence; effective GB/s counts the cache bytes read once. The device copy
    # bandwidth (bytes read + written) is the bound decode kernels are held to.
    B, H, KVH, S, D = 32, 32, 8, 4096, 128
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, KVH, S, D, device="cuda", dtype=torch.float16) for _ in range(2))
    cache_bytes = 2 * B * KVH * S * D * 2
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(be):
                ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            out["rows"].append({"what": f"sdpa_{name}_decode_B{B}H{H}KV{KVH}S{S}D{D}", "ms": ms, "GB/s": cache_bytes / ms / 1e6})
        except RuntimeError as e:
            out["rows"].append({"what": f"sdpa_{name}_decode_B{B}H{H}KV{KVH}S{S}D{D}", "error": str(e)[:200]})
    src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    out["rows"].append({"what": "copy_1GiB", "ms": ms, "GB/s": 2 * src.numel() / ms / 1e6})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
