mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
f() { grep -v "bench setup" $1 | sed -E 's/ejk: measure//; s/prepare.*timing/timing/' | cut -c 1-60,130-420; }
EJK_LOG_TUNE=1 timeout 100 ejk tune fused_ok2.tmp.yaml > $R/fa_ok2.txt 2>&1; f $R/fa_ok2.txt | grep -v "timing ("
export EJK_CACHE_DIR=$(mktemp -d)
EJK_LOG_TUNE=1 timeout 100 ejk tune fused_tune2.tmp.yaml > $R/fused_tune.txt 2>&1; f $R/fused_tune.txt
timeout 60 python3 fapeer.tmp.py > $R/fapeer.txt 2>&1; cat $R/fapeer.txt
timeout 100 ejk_bench --benchmark_filter='BM_grouped_matmul/opencl:0/.*(heuristic|peer)' > $R/grouped.txt 2>&1; grep BM_ $R/grouped.txt | cut -c1-20,85-240
EJK_BENCH_TUNE_EVALS=0 EJK_BENCH_BSA_SHAPE=4,16,4096,128 timeout 120 ejk_bench --benchmark_filter='block_sparse_attention_gpu/opencl:0' > $R/bsa_d128.txt 2>&1
grep "^BM_" $R/bsa_*.txt | cut -c1-200
cd $OUT && tar -czf r.tgz r && rm -rf r
