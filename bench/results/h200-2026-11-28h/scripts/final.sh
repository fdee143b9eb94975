# The kept build: mla_decode's Vulkan tests and ejk_bench with the copies (three times); the tune of native_sparse_attention's four tensor-core configs at 4096 and 16384 tokens on NVIDIA's OpenCL.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28h/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 100 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
for i in 1 2 3; do timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl|cuda):0' > $R/mla-$i.txt 2>&1; grep manual_time $R/mla-$i.txt | cut -c1-150; done
EJK_LOG_TUNE=1 timeout 150 ejk tune $S/nsa-tune.yaml --json $R/nsa-tune.json > $R/nsa-tune.txt 2>&1; tail -3 $R/nsa-tune.txt | cut -c1-250
python3 $S/tune-sorted.py $R/nsa-tune.json > $R/nsa-tune-sorted.txt 2>&1; cat $R/nsa-tune-sorted.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
