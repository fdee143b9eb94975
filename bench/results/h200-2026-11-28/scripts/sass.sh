mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28/scripts
EJK_BENCH_TUNE_EVALS=0 ejk_bench --benchmark_filter='mla_decode_gpu/(vulkan:0)/heur' > $R/mla.txt 2>&1
ND=$(command -v nvdisasm || ls /usr/local/cuda*/bin/nvdisasm | head -1); echo nvdisasm=$ND
mkdir -p $R/sass
for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null); do
  n=$(basename $f | cut -c1-16)
  NVDISASM=$ND python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$n.sass 2>&1 | head -3
  echo "  LDL/STL: $(grep -c 'LDL\|STL' $R/sass/$n.sass) BAR: $(grep -c 'BAR' $R/sass/$n.sass) HMMA: $(grep -c HMMA $R/sass/$n.sass) size $(stat -c%s $f)"
done
cd $OUT && tar -czf r.tgz r && rm -rf r
