mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; R=$OUT/r; mkdir -p $R
export EJK_CACHE_DIR=$(mktemp -d) EJK_BENCH_TUNE_EVALS=0
timeout 200 ejk_tests --gtest_filter='*FlashAttentionVulkan*:*FragmentRows*:Vulkan*Coopmat*:*MlaAttention.VulkanCoopmat*:VulkanCoopmatKhr*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A4 Failure $R/tests.txt | cut -c1-300
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/cublas.py > $R/cublas.txt 2>&1; head -1 $R/cublas.txt
timeout 90 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/fa2.txt 2>&1; cat $R/fa2.txt | head -4
for mode in nv khr; do
  export EJK_CACHE_DIR=$(mktemp -d) EJK_VULKAN_COOPMAT=$mode
  timeout 150 ejk run bench/results/h200-2026-11-28e/scripts/work.yaml --passes --json $R/work-$mode.json > $R/work-$mode.txt 2>&1; echo "== $mode"; cut -c1-60,100-150 $R/work-$mode.txt
  timeout 100 ejk_bench --benchmark_filter='mla_decode_gpu/vulkan:0/(heur|copy)' > $R/mla-$mode.txt 2>&1; grep BM_ $R/mla-$mode.txt | cut -c1-150
  mkdir -p $R/sass-$mode; for f in $(find $EJK_CACHE_DIR -type f -size +30k); do NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 30 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass-$mode/$(basename $f | cut -c1-12).sass > /dev/null 2>&1; done
done
cd $OUT && tar -czf r.tgz r && rm -rf r
