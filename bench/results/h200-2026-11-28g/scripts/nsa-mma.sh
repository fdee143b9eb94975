# native_sparse_attention's forward on tensor cores (OpenCL C, inline PTX; on cuda through NVRTC): its reference tests, the CUDA compile test, ejk_bench against dense causal flash attention on OpenCL and cuda (the paper's shape at 4096 tokens, bf16).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
export EJK_BENCH_TUNE_EVALS=0
timeout 200 ejk_tests --gtest_filter='*NativeSparse*TensorCore*:*CudaCompile*' > $R/tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED|rror' $R/tests.txt | head -20
timeout 150 ejk_bench --benchmark_filter='BM_nsa_fwd_gpu/(opencl|cuda):0' > $R/nsa-fwd.txt 2>&1; grep -E "manual_time|rror" $R/nsa-fwd.txt | cut -c1-170
cd $OUT && tar -czf r.tgz r && rm -rf r
