# The Vulkan cooperative-matrix backward as committed (4 x 16 rows, 16-row tiles and blocks): its reference tests, flash attention's backward plain and causal, block_sparse_attention against dense causal, FlashAttention-2 in the same call.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
export EJK_BENCH_TUNE_EVALS=0
timeout 150 ejk_tests --gtest_filter='*FlashAttentionVulkan.Cooperative*:*BlockSparseAttention.FlashPasses*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A4 Failure $R/tests.txt | cut -c1-300
timeout 100 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/bwd' > $R/fa.txt 2>&1; grep manual_time $R/fa.txt | cut -c1-150
timeout 100 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/fwd/causal/heuristic|block_sparse_attention_gpu/vulkan:0' > $R/bsa.txt 2>&1; grep manual_time $R/bsa.txt | cut -c1-190
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/peer.txt 2>&1; grep bwd $R/peer.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
