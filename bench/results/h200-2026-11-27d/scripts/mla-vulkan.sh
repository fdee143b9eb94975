R=$OUT/r; mkdir -p $R
for v in old new; do
  rm -rf .device; mkdir -p .device
  if [ $v = old ]; then tar -C .device -xJf old.tar.xz; else tar -C .device -xJf .devpack.tar.xz; fi
  ( . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d)
    EJK_BENCH_TUNE_EVALS=0 timeout 200 ejk_bench --benchmark_filter='mla_decode_gpu/(vulkan:0|opencl:0)' > $R/mla-$v.txt 2>&1 )
  grep -E "BM_" $R/mla-$v.txt | cut -c1-220
done
. .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d)
timeout 200 ejk_tests --gtest_filter='*MlaAttention*vulkan*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
