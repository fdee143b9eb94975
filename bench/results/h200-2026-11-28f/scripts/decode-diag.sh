# Where the Vulkan decode passes spend their time: the CUDA native pass and copy on the same GPU, an L2-resident shape (batch 2, 33.5 MB of cache) against batch 32, and the SASS of the cooperative-matrix pass.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28f/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 90 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='((page_attention|ragged_decode_attention|ragged_page_attention)/(cuda|vulkan):0/heur|decode_copy_peer/(cuda|vulkan):0)' > $R/decode.txt 2>&1; grep manual_time $R/decode.txt | cut -c1-150
find $EJK_CACHE_DIR -size +20k | head -20 > $R/files.txt
for f in $(cat $R/files.txt); do NVDISASM=/usr/local/cuda/bin/nvdisasm python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/$(basename $f).sass 2>&1 | tail -2; done > $R/sass-summary.txt; cat $R/sass-summary.txt
EJK_LOG_TUNE=1 timeout 200 ejk tune $S/decode-l2.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -3 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  print(b.get('kernel'), b.get('workload', ''))
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18)[:14]: print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
ls $R | head -30
cd $OUT && tar -czf r.tgz r && rm -rf r
