# mla_decode on Vulkan with the merge's four chunks of w_vc in named register sets: the Vulkan tests, pass by pass with 16, 8 and 4 sequences a merge group (EJK_TMP_ROWS, an experimental build), ejk_bench with the copy, the merge's SASS.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 120 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
for rows in 16 8 4 16 8 4; do EJK_TMP_ROWS=$rows timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes > $R/mla-passes-rows$rows.txt 2>&1; echo rows $rows; tail -4 $R/mla-passes-rows$rows.txt | cut -c1-20,125-160; done
export EJK_CACHE_DIR=$(mktemp -d)
timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl|cuda):0' > $R/mla.txt 2>&1; grep manual_time $R/mla.txt | cut -c1-150
bash $S/sass-dump.sh $R
cd $OUT && tar -czf r.tgz r && rm -rf r
