# The Vulkan pipeline store after page_attention, ragged_page_attention and ragged_decode_attention run once each (heuristic configs): the driver's machine code of each pipeline, disassembled elsewhere with bench/results/h200-2026-11-27d/scripts/vulkan-sass.py.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R/store
EJK_BENCH_TUNE_EVALS=0 timeout 100 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='(page_attention|ragged_decode_attention|ragged_page_attention)/vulkan:0/heur' > $R/bench.txt 2>&1
grep manual_time $R/bench.txt | cut -c1-150
i=0; for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null); do i=$((i+1)); cp $f $R/store/p$i.bin; done; ls -la $R/store | head -30
cd $OUT && tar -czf r.tgz r && rm -rf r
