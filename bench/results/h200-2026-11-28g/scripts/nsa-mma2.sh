# native_sparse_attention's tensor-core forward: its tests on OpenCL and cuda; the scalar kernel at the test's first shape on the device machine's PoCL (which aborted there in the first run of the test); ejk_bench at 4096 and 16384 tokens against dense causal flash attention.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 120 ejk_tests --gtest_filter='*NativeSparse*TensorCore*' > $R/tests.txt 2>&1; grep -E 'OK|FAILED|Failure|PASSED|SKIPPED \]' $R/tests.txt | head -20
timeout 60 ejk --device opencl:1 run $S/nsa-case1.yaml --check > $R/pocl-case1.txt 2>&1; echo "pocl rc $?"; tail -5 $R/pocl-case1.txt | cut -c1-250
ejk --device opencl:1 devices > $R/pocl-devices.txt 2>&1; ejk devices --json > $R/devices.json 2>&1
timeout 90 ejk_bench --benchmark_filter='BM_nsa_fwd_gpu/(opencl|cuda):0' > $R/nsa-fwd-4096.txt 2>&1; grep -E "manual_time" $R/nsa-fwd-4096.txt | cut -c1-170
EJK_BENCH_NSA_SHAPE=1,16384,64,4,128,16,64 timeout 150 ejk_bench --benchmark_filter='BM_nsa_fwd_gpu/(opencl|cuda):0' > $R/nsa-fwd-16384.txt 2>&1; grep -E "manual_time" $R/nsa-fwd-16384.txt | cut -c1-170
cd $OUT && tar -czf r.tgz r && rm -rf r
