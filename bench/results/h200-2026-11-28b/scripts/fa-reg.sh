# Vulkan flash attention forward with the softmax in registers: tests, the heuristic against FlashAttention-2 in the same call, a tune of every cooperative-matrix config (both softmax paths), the paged decode timings, the SASS of the pipelines.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28b/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 120 ejk_tests --gtest_filter='*FragmentRows*:*FlashAttentionVulkan*:*BlockSparse*vulkan_0*:*FlashAttention*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m4 -A4 Failure $R/tests.txt | cut -c1-300
export EJK_CACHE_DIR=$(mktemp -d); timeout 70 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/fwd/heuristic' > $R/fa.txt 2>&1; grep manual_time $R/fa.txt | cut -c1-150
mkdir -p $R/sass; for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null); do
  n=$(basename $f | cut -c1-16); NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 60 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$n.sass > /dev/null 2>&1
  h=$(grep -c HMMA $R/sass/$n.sass); [ "$h" -gt 0 ] && echo "$n LDL/STL: $(grep -c 'LDL\|STL' $R/sass/$n.sass) HMMA: $h MOVM: $(grep -c MOVM $R/sass/$n.sass) SHFL: $(grep -c SHFL $R/sass/$n.sass) BAR: $(grep -c BAR $R/sass/$n.sass)"; done 2>&1 | head -30
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/peer.txt 2>&1; grep fwd $R/peer.txt
EJK_LOG_TUNE=1 timeout 170 ejk tune $S/fa-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -2 $R/tune.txt | cut -c1-200
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for c in sorted(d['benchmarks'][0]['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:60]: print(c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; head -12 $R/tune-sorted.txt
timeout 70 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='((page_attention|ragged_decode_attention|ragged_page_attention)/vulkan:0/heur|decode_copy_peer/vulkan:0)' > $R/decode.txt 2>&1; grep manual_time $R/decode.txt | cut -c1-150
cd $OUT && tar -czf r.tgz r && rm -rf r
