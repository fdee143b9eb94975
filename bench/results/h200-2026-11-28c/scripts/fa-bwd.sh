# The Vulkan flash attention backward on cooperative matrices (first version: S^T = k q^T, dv += P^T dout, q and dout staged synchronously): tests, the heuristic and a tune of its configs, FlashAttention-2 in the same call.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28c/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 200 ejk_tests --gtest_filter='*FlashAttentionVulkan*:*BlockSparse*vulkan_0*:*FlashAttention*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A4 Failure $R/tests.txt | cut -c1-300
timeout 90 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/bwd' > $R/fa.txt 2>&1; grep manual_time $R/fa.txt | cut -c1-150
EJK_LOG_TUNE=1 timeout 170 ejk tune $S/fa-bwd-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -1 $R/tune.txt | cut -c1-200
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for c in sorted(d['benchmarks'][0]['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:60]: print(c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; head -12 $R/tune-sorted.txt
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/peer.txt 2>&1; grep bwd $R/peer.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
