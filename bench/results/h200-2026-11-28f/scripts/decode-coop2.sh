# The Vulkan decode's cooperative-matrix pass against the scalar stream pass (B32 H32/8 ctx 4096 D128 f16, pages of 16): tests, heuristic rows with the CUDA native pass and the copies, a tune of the stream-2 configs (arguments: the tune's recipe, default decode-coop.yaml, and its time limit, default 280 s; `final/` ran `decode-coop2.sh decode-final.yaml 150`).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28f/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 100 ejk_tests --gtest_filter='*PageAttention*ulkan*:*RaggedDecode*ulkan*:*RaggedPage*ulkan*' > $R/decode-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED|SKIPPED' $R/decode-tests.txt | head -20
export EJK_CACHE_DIR=$(mktemp -d)
timeout 90 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='((page_attention|ragged_decode_attention|ragged_page_attention)/(cuda|vulkan):0/heur|decode_copy_peer/(cuda|vulkan):0)' > $R/decode.txt 2>&1; grep manual_time $R/decode.txt | cut -c1-150
EJK_LOG_TUNE=1 timeout ${2:-280} ejk tune $S/${1:-decode-coop.yaml} --json $R/tune.json > $R/tune.txt 2>&1; tail -2 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  print(b.get('kernel'), b.get('workload', ''))
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:10]: print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
