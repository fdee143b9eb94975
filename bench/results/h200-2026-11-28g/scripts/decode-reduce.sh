# The decode engine's Vulkan reduce pass with eight parts' loads in flight and an online merge; the kept mla build's tests: the decode and mla tests on the H200, the decode kernels pass by pass, ejk_bench decode rows with the Vulkan shader copy and CUDA's pass, twice.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 200 ejk_tests --gtest_filter='*PageAttention*ulkan*:*RaggedDecode*ulkan*:*RaggedPage*ulkan*:*DecodeAttention*ulkan*:*MlaAttention*ulkan*' > $R/tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/tests.txt | head
for i in 1 2; do timeout 90 ejk --device vulkan:0 run $S/decode.yaml --passes > $R/decode-passes-$i.txt 2>&1; cut -c1-40,100-200 $R/decode-passes-$i.txt; done
for i in 1 2; do timeout 90 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='((page_attention|ragged_decode_attention|ragged_page_attention)/(cuda|vulkan):0/heur|decode_copy_peer/(cuda|vulkan):0)' > $R/decode-$i.txt 2>&1; grep manual_time $R/decode-$i.txt | cut -c1-150; done
cd $OUT && tar -czf r.tgz r && rm -rf r
