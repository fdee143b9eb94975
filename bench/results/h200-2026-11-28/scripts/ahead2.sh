# mla_decode's Vulkan attend pass with two tiles in registers (new) against one (old), alternating; tests; the new pass's SASS.
mkdir -p .device .old && tar -C .device -xJf .devpack.tar.xz && tar -C .old -xJf .devpack-old.tmp.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28/scripts
ejk_tests --gtest_filter='*MlaAttention*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt
F='mla_decode_gpu/vulkan:0/(heur|copy)'
export EJK_BENCH_TUNE_EVALS=0
for i in 1 2; do
  EJK_CACHE_DIR=$(mktemp -d) .old/bin/ejk_bench --benchmark_filter="$F" > $R/old-$i.txt 2>&1
  ejk_bench --benchmark_filter="$F" > $R/new-$i.txt 2>&1
  grep -h "GB/s=" $R/old-$i.txt $R/new-$i.txt | sed 's/.*manual_time *//' | cut -c1-70
done
mkdir -p $R/sass; for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null); do
  n=$(basename $f | cut -c1-16); NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 60 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$n.sass 2>&1 | head -1
  echo "  LDL/STL: $(grep -c 'LDL\|STL' $R/sass/$n.sass) HMMA: $(grep -c HMMA $R/sass/$n.sass) BAR: $(grep -c BAR $R/sass/$n.sass)"; done 2>&1 | head -20
cd $OUT && tar -czf r.tgz r && rm -rf r
