# Vulkan scratch from a pool (new) against an allocation a run (old, the build before), alternating: mla_decode and the decode kernels with their copies; Vulkan tests.
mkdir -p .device .old && tar -C .device -xJf .devpack.tar.xz && tar -C .old -xJf .devpack-old.tmp.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
ejk_tests --gtest_filter='*MlaAttention*vulkan_0*:*PageAttention*vulkan_0*:*RaggedDecode*vulkan_0*:*FlashAttention*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m3 -A3 Failure $R/tests.txt | cut -c1-300
F='(mla_decode_gpu/vulkan:0/(heur|copy)|(page_attention|ragged_decode_attention)/vulkan:0/heur|decode_copy_peer/vulkan:0)'
export EJK_BENCH_TUNE_EVALS=0
for i in 1 2 3; do
  EJK_CACHE_DIR=$(mktemp -d) .old/bin/ejk_bench --benchmark_filter="$F" > $R/old-$i.txt 2>&1
  ejk_bench --benchmark_filter="$F" > $R/new-$i.txt 2>&1
  grep -h "manual_time" $R/old-$i.txt $R/new-$i.txt | sed 's/\/min_time:0.200\/manual_time//' | cut -c1-150
done
cd $OUT && tar -czf r.tgz r && rm -rf r
