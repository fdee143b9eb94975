# One step of native_sparse_attention's backward (nsa-dq, nsa-dkv, nsa-dcmp: this build against the one before it, carried in .device/old): the tests first, then pass by pass (OpenCL) and ejk_bench against dense causal flash attention, both builds in the same call.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28i/scripts; export EJK_BENCH_TUNE_EVALS=0
old="env LD_LIBRARY_PATH=$PWD/.device/old:$LD_LIBRARY_PATH $PWD/.device/old"
timeout 120 ejk_tests --gtest_filter='Devices/NativeSparseAttention.*Backward*/*_0:Devices/NativeSparseAttention.ForwardAndGradients*/*_0:Devices/NativeSparseAttention.GroupsWidths*/*_0:Devices/NativeSparseAttention.PackedSequences/*_0' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A8 Failure $R/tests.txt | cut -c1-300
timeout 60 ejk run $S/nsa-bwd.yaml --passes > $R/passes-opencl.txt 2>&1; grep -E "ms|us" $R/passes-opencl.txt | cut -c1-40,110-220
F='BM_nsa_bwd_gpu/(opencl|cuda):0/(heuristic|dense_peer)'
for shape in 1,4096,64,4,128,16,64 1,16384,64,4,128,16,64; do
  EJK_BENCH_NSA_SHAPE=$shape timeout 100 ejk_bench --benchmark_filter="$F" > $R/new_$shape.txt 2>&1; grep "^BM_" $R/new_$shape.txt | cut -c1-130
  EJK_BENCH_NSA_SHAPE=$shape timeout 100 $old/ejk_bench --benchmark_filter="$F" > $R/old_$shape.txt 2>&1; grep "^BM_" $R/old_$shape.txt | cut -c1-130
done
cd $OUT && tar -czf r.tgz r && rm -rf r
