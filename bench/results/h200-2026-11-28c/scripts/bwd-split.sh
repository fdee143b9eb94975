# The Vulkan cooperative-matrix backward pass by pass (an experimental build whose EJK_X_SKIP leaves one pass out; timing only), and its SASS.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
export EJK_BENCH_TUNE_EVALS=0
for s in none dkdv dq; do echo "skip $s"; EJK_X_SKIP=$s timeout 60 ejk_bench --benchmark_filter='flash_attention_gpu/vulkan:0/bwd/heuristic' > $R/fa-$s.txt 2>&1; grep manual_time $R/fa-$s.txt | cut -c1-150; done
mkdir -p $R/sass; for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null | head -8); do
  n=$(basename $f | cut -c1-16); NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 40 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$n.sass > $R/sass/$n.txt 2>&1
  h=$(grep -c HMMA $R/sass/$n.sass 2>/dev/null); [ "${h:-0}" -gt 0 ] && echo "$n LDL/STL: $(grep -c 'LDL\|STL' $R/sass/$n.sass) HMMA: $h MOVM: $(grep -c MOVM $R/sass/$n.sass) LDS: $(grep -c 'LDS\|LDSM' $R/sass/$n.sass) BAR: $(grep -c BAR $R/sass/$n.sass) $(head -1 $R/sass/$n.txt)"; done 2>&1 | head -12
cd $OUT && tar -czf r.tgz r && rm -rf r
