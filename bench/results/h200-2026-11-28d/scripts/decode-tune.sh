# The paged and ragged decode on Vulkan (B32 H32/8 ctx 4096 D128 f16, pages of 16): the heuristic and the shader copy, then an exhaustive tune of each kernel's space.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28d/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 70 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='((page_attention|ragged_decode_attention|ragged_page_attention)/vulkan:0/heur|decode_copy_peer/vulkan:0)' > $R/decode.txt 2>&1; grep manual_time $R/decode.txt | cut -c1-150
ejk --device vulkan:0 kernels --space page_attention --dtype f16 --size batch=32 --size context=4096 --size block_size=16 > $R/space.txt 2>&1; head -30 $R/space.txt
EJK_LOG_TUNE=1 timeout 300 ejk tune $S/decode-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -4 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  print(b.get('kernel'), b.get('workload', ''))
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:12]: print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
