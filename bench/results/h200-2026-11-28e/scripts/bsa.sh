mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; R=$OUT; export EJK_BENCH_TUNE_EVALS=0
for mode in khr nv; do export EJK_CACHE_DIR=$(mktemp -d) EJK_VULKAN_COOPMAT=$mode
timeout 90 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/(fwd|bwd)/causal/heuristic|block_sparse_attention_gpu/vulkan:0' > $R/bsa-$mode.txt 2>&1; grep manual_time $R/bsa-$mode.txt | cut -c1-200; done
