mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
timeout 100 ejk_tests --gtest_filter='*MlaAttention*/opencl_0:*MlaAttention*/cuda_0' > $R/mla_tests.txt 2>&1; grep -E "^\[  (PASSED|FAILED)|FAILED" $R/mla_tests.txt | head
EJK_BENCH_TUNE_EVALS=0 timeout 100 ejk_bench --benchmark_filter='mla_decode_gpu/(opencl:0|cuda)' > $R/mla.txt 2>&1; grep BM_ $R/mla.txt | cut -c1-200
timeout 100 ejk run bwd.tmp.yaml --json $R/bwd.json > $R/bwd.txt 2>&1; cut -c1-60,130-200 $R/bwd.txt
timeout 60 python3 fapeer.tmp.py > $R/fapeer.txt 2>&1; cat $R/fapeer.txt
timeout 100 ejk run fa64.tmp.yaml --json $R/fa64.json > $R/fa64.txt 2>&1; cut -c1-60,130-200 $R/fa64.txt
timeout 60 python3 fapeer64.tmp.py > $R/fapeer64.txt 2>&1; cat $R/fapeer64.txt
EJK_BENCH_TUNE_EVALS=0 EJK_BENCH_BSA_SHAPE=4,16,4096,128 timeout 120 ejk_bench --benchmark_filter='block_sparse_attention_gpu/opencl:0' > $R/bsa.txt 2>&1; grep "^BM_" $R/bsa.txt | cut -c1-200
cd $OUT && tar -czf r.tgz r && rm -rf r
