# native_sparse_attention's backward with the pooled gradient spread over the block's tokens: pass by pass (OpenCL, Vulkan) and ejk_bench against dense causal flash attention, the build before (.device/old) in the same call.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28i/scripts; export EJK_BENCH_TUNE_EVALS=0
old="env LD_LIBRARY_PATH=$PWD/.device/old:$LD_LIBRARY_PATH $PWD/.device/old"  # the build before: .device/old/{ejk,ejk_bench,libejk.so.0}
timeout 60 ejk run $S/nsa-bwd.yaml --passes > $R/passes-opencl.txt 2>&1; grep -E "ms|us" $R/passes-opencl.txt | cut -c1-40,110-150
sed 's/opencl:0/vulkan:0/' $S/nsa-bwd.yaml > /tmp/v.yaml; timeout 90 ejk run /tmp/v.yaml --passes > $R/passes-vulkan.txt 2>&1; grep -E "ms|us" $R/passes-vulkan.txt | cut -c1-40,110-150
timeout 90 $old/ejk run /tmp/v.yaml --passes > $R/passes-vulkan-old.txt 2>&1; grep -E "ms|us" $R/passes-vulkan-old.txt | cut -c1-40,110-150
F='BM_nsa_bwd_gpu/(opencl|cuda|vulkan):0/(heuristic|dense_peer)'
for shape in 1,4096,64,4,128,16,64 1,16384,64,4,128,16,64; do
  EJK_BENCH_NSA_SHAPE=$shape timeout 100 ejk_bench --benchmark_filter="$F" > $R/new_$shape.txt 2>&1; grep "^BM_" $R/new_$shape.txt | cut -c1-130
  EJK_BENCH_NSA_SHAPE=$shape timeout 100 $old/ejk_bench --benchmark_filter="$F" > $R/old_$shape.txt 2>&1; grep "^BM_" $R/old_$shape.txt | cut -c1-130
done
timeout 60 ejk_tests --gtest_filter='*native_sparse_attention_bwd*/*_0:*NativeSparseAttention*/*_0' > $R/tests.txt 2>&1; tail -3 $R/tests.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
