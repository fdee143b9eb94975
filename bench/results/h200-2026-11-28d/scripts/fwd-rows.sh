# Vulkan flash attention forward with 32 query rows a subgroup (coop_rows 32: each B fragment serves two products): reference tests, a tune of the register-softmax configs with 16 and 32 rows, the heuristic, FlashAttention-2 in the same call, SASS.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28d/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 150 ejk_tests --gtest_filter='*FlashAttentionVulkan.CooperativeMatrixForward*:*BlockSparseAttention.FlashPasses*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A4 Failure $R/tests.txt | cut -c1-300
EJK_LOG_TUNE=1 timeout 170 ejk tune $S/fwd-rows-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -1 $R/tune.txt | cut -c1-200
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for c in sorted(d['benchmarks'][0]['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:60]: print(c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
timeout 60 ejk_bench --benchmark_filter="flash_attention_gpu/vulkan:0/fwd/heuristic" > $R/fa.txt 2>&1; grep manual_time $R/fa.txt | cut -c1-150
timeout 40 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/peer.txt 2>&1; grep fwd $R/peer.txt
mkdir -p $R/sass; for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null | head -10); do
  n=$(basename $f | cut -c1-16); NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 20 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$n.sass > $R/sass/$n.txt 2>&1
  h=$(grep -c HMMA $R/sass/$n.sass 2>/dev/null); [ "${h:-0}" -gt 0 ] && echo "$n LDL/STL: $(grep -c 'LDL\|STL' $R/sass/$n.sass) HMMA: $h MOVM: $(grep -c MOVM $R/sass/$n.sass) SHFL: $(grep -c SHFL $R/sass/$n.sass) BAR: $(grep -c BAR $R/sass/$n.sass) $(head -1 $R/sass/$n.txt)"; done 2>&1 | head -12
cd $OUT && tar -czf r.tgz r && rm -rf r
