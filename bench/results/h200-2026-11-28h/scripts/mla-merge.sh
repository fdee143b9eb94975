# mla_decode's Vulkan merge with eight chunks of w_vc in flight and the first parts' o_lat loaded before their weights (and the absorb in 128 groups): the tests, pass by pass, ejk_bench with the copies, the SASS.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28h/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 150 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
for i in 1 2; do timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes > $R/mla-passes-$i.txt 2>&1; tail -4 $R/mla-passes-$i.txt | cut -c1-20,125-160; done
bash bench/results/h200-2026-11-28g/scripts/sass-dump.sh $R
for i in 1 2 3; do timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl|cuda):0' > $R/mla-$i.txt 2>&1; grep manual_time $R/mla-$i.txt | cut -c1-150; done
cd $OUT && tar -czf r.tgz r && rm -rf r
