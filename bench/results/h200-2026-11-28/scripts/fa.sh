# Vulkan flash attention (B4 H16 S4096 D128 f16) with the scratch pool (new) and without (old), and FlashAttention-2 through PyTorch in the same call.
mkdir -p .device .old && tar -C .device -xJf .devpack.tar.xz && tar -C .old -xJf .devpack-old.tmp.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
export EJK_BENCH_TUNE_EVALS=0
F='flash_attention_gpu/vulkan:0/(fwd|bwd)/heuristic'
timeout 70 .old/bin/ejk_bench --benchmark_filter="$F" > $R/old.txt 2>&1
timeout 70 ejk_bench --benchmark_filter="$F" > $R/new.txt 2>&1
grep -h "manual_time" $R/old.txt $R/new.txt | sed 's/\/min_time:0.200\/manual_time//' | cut -c1-140
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/peer.txt 2>&1; tail -5 $R/peer.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
