mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
EJK_LOG_TUNE=1 timeout 150 ejk tune fused_ok.tmp.yaml > $R/ok.txt 2>&1; grep -v "measure\|bench setup" $R/ok.txt | cut -c 1-60,130-400
EJK_LOG_TUNE=1 timeout 150 ejk tune fused_tune2.tmp.yaml > $R/tune.txt 2>&1; grep -v "bench setup" $R/tune.txt | sed -E 's/prepare.*timing/timing/' | cut -c 1-400
timeout 60 python3 fapeer.tmp.py > $R/fapeer.txt 2>&1; cat $R/fapeer.txt
timeout 90 ejk run mmrun.tmp.yaml --json $R/mmrun.json > $R/mmrun.txt 2>&1; cut -c1-50,100-300 $R/mmrun.txt
timeout 60 python3 peer.tmp.py > $R/cublas.txt 2>&1; cat $R/cublas.txt
timeout 120 ejk_bench --benchmark_filter='BM_grouped_matmul/opencl:0/.*(heuristic|peer)' > $R/grouped.txt 2>&1; grep BM_ $R/grouped.txt | cut -c1-20,85-200
cd $OUT && tar -czf r.tgz r && rm -rf r
