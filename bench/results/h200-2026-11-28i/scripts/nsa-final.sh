# native_sparse_attention's backward, the kept build (the key-side passes sharing their per-query product): the tensor-core test on OpenCL, the heuristic's tests on OpenCL and cuda, pass by pass and ejk_bench against dense causal.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28i/scripts; export EJK_BENCH_TUNE_EVALS=0
timeout 100 ejk_tests --gtest_filter='Devices/NativeSparseAttention.TensorCoreBackward*/opencl_0:Devices/NativeSparseAttention.ForwardAndGradients*/cuda_0:Devices/NativeSparseAttention.GroupsWidths*/cuda_0:Devices/NativeSparseAttention.PackedSequences/cuda_0' > $R/tests.txt 2>&1; tail -2 $R/tests.txt; grep -m6 -A8 Failure $R/tests.txt | cut -c1-300
timeout 30 ejk run $S/nsa-bwd.yaml --passes > $R/passes-opencl.txt 2>&1; grep -E "ms|us" $R/passes-opencl.txt | cut -c1-40,110-150
for shape in 1,4096,64,4,128,16,64 1,16384,64,4,128,16,64; do
  EJK_BENCH_NSA_SHAPE=$shape timeout 60 ejk_bench --benchmark_filter='BM_nsa_bwd_gpu/(opencl|cuda):0/(heuristic|dense_peer)' > $R/bench_$shape.txt 2>&1; grep "^BM_" $R/bench_$shape.txt | cut -c1-120
done
cd $OUT && tar -czf r.tgz r && rm -rf r
