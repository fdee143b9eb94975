mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
f() { grep -v "bench setup" $1 | sed -E 's/prepare.*timing/timing/' | cut -c 1-60,130-420; }
EJK_LOG_TUNE=1 timeout 120 ejk tune fused_ok.tmp.yaml > $R/fa_ok.txt 2>&1; f $R/fa_ok.txt | grep -v measure
EJK_LOG_TUNE=1 timeout 90 ejk tune bsa_ok.tmp.yaml > $R/bsa_ok.txt 2>&1; f $R/bsa_ok.txt
timeout 60 ejk run bwd.tmp.yaml --json $R/bwd.json > $R/bwd.txt 2>&1; cut -c1-20,130-400 $R/bwd.txt
timeout 60 python3 fapeer.tmp.py > $R/fapeer.txt 2>&1; cat $R/fapeer.txt
export EJK_CACHE_DIR=$(mktemp -d)
EJK_LOG_TUNE=1 timeout 100 ejk tune fused_tune2.tmp.yaml > $R/fused_tune.txt 2>&1; f $R/fused_tune.txt
EJK_BENCH_TUNE_EVALS=0 EJK_BENCH_BSA_SHAPE=4,16,4096,128 timeout 150 ejk_bench --benchmark_filter='block_sparse_attention_gpu/opencl:0' > $R/bsa_d128.txt 2>&1
EJK_BENCH_TUNE_EVALS=0 timeout 100 ejk_bench --benchmark_filter='block_sparse_attention_gpu/opencl:0' > $R/bsa_d64.txt 2>&1
grep "^BM_" $R/bsa_*.txt | cut -c1-300
cd $OUT && tar -czf r.tgz r && rm -rf r
