mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
timeout 200 ejk_tests --gtest_filter='*MlaAttention*vulkan*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -B3 -A8 "Failure" $R/tests.txt | head -40
EJK_BENCH_TUNE_EVALS=0 timeout 200 ejk_bench --benchmark_filter='mla_decode_gpu/(vulkan:0|opencl:0)' > $R/mla.txt 2>&1; grep BM_ $R/mla.txt | cut -c1-60,100-260
cd $OUT && tar -czf r.tgz r && rm -rf r
