# mla_decode's Vulkan attend pass with q in fragment registers and two groups an SM (new) against the committed pass (old), alternating; tests; a tune of the coopmat configs.
mkdir -p .device .old && tar -C .device -xJf .devpack.tar.xz && tar -C .old -xJf .devpack-old.tmp.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28/scripts
ejk_tests --gtest_filter='*MlaAttention*vulkan_0*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m3 -A3 Failure $R/tests.txt | cut -c1-300
F='mla_decode_gpu/vulkan:0/(heur|copy)'
export EJK_BENCH_TUNE_EVALS=0
for i in 1 2 3; do
  EJK_CACHE_DIR=$(mktemp -d) .old/bin/ejk_bench --benchmark_filter="$F" > $R/old-$i.txt 2>&1
  ejk_bench --benchmark_filter="$F" > $R/new-$i.txt 2>&1
  grep -h "GB/s=" $R/old-$i.txt $R/new-$i.txt | sed 's/.*manual_time *//' | cut -c1-230
done
EJK_LOG_TUNE=1 timeout 100 ejk tune $S/mla-coopmat-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; grep -v "^ejk: measure" $R/tune.txt | cut -c1-250 | tail -2
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for c in sorted(d['benchmarks'][0]['candidates'], key=lambda c: c.get('median_ns') or 1e18): print(c.get('config'), c.get('median_ns'))"
cd $OUT && tar -czf r.tgz r && rm -rf r
