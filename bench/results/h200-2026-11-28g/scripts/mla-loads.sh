# mla_decode on Vulkan with the absorb's and the attend's staging loads issued before their stores: the Vulkan tests, pass by pass (heuristic), a tune of the coopmat configs, ejk_bench with the copies, the SASS.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 120 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
for i in 1 2; do timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes > $R/mla-passes-$i.txt 2>&1; tail -4 $R/mla-passes-$i.txt | cut -c1-20,125-160; done
EJK_LOG_TUNE=1 timeout 200 ejk tune $S/mla-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -1 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:8]: print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
export EJK_CACHE_DIR=$(mktemp -d)
timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl|cuda):0' > $R/mla.txt 2>&1; grep manual_time $R/mla.txt | cut -c1-150
bash $S/sass-dump.sh $R
cd $OUT && tar -czf r.tgz r && rm -rf r
