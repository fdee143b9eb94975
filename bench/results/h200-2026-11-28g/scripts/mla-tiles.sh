# mla_decode on Vulkan with 32-row attend tiles (coop_block_n) and the merge's part loads AHEAD = 16 / ROWS: the Vulkan tests, a tune of every coopmat config, pass by pass with 16 and 4 sequences a merge group (EJK_TMP_ROWS, an experimental build), ejk_bench with the copy.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 120 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
EJK_LOG_TUNE=1 timeout 200 ejk tune $S/mla-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -2 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:24]: print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
for rows in 16 4 16 4; do EJK_TMP_ROWS=$rows timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes > $R/mla-passes-rows$rows.txt 2>&1; echo rows $rows; tail -4 $R/mla-passes-rows$rows.txt | cut -c1-20,125-160; done
timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl):0' > $R/mla.txt 2>&1; grep manual_time $R/mla.txt | cut -c1-150
cd $OUT && tar -czf r.tgz r && rm -rf r
