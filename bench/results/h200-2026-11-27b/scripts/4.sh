mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
f() { grep -v "bench setup" $1 | sed -E 's/ejk: measure//; s/prepare.*timing/timing/' | cut -c 1-60,130-420; }
timeout 60 ejk run bwd.tmp.yaml --json $R/bwd.json > $R/bwd.txt 2>&1; cut -c1-20,130-400 $R/bwd.txt
timeout 60 python3 fapeer.tmp.py > $R/fapeer.txt 2>&1; cat $R/fapeer.txt
timeout 60 ejk run bwd.tmp.yaml --json $R/bwd2.json > $R/bwd2.txt 2>&1; cut -c1-20,130-400 $R/bwd2.txt
EJK_LOG_TUNE=1 timeout 280 ejk tune gtune.tmp.yaml > $R/gtune.txt 2>&1; f $R/gtune.txt
timeout 120 ejk_bench --benchmark_filter='BM_grouped_matmul/opencl:0/.*(heuristic|peer)' > $R/grouped.txt 2>&1; grep BM_ $R/grouped.txt | cut -c1-20,85-200
cd $OUT && tar -czf r.tgz r && rm -rf r
