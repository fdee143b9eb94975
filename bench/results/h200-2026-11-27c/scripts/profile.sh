mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
which ncu; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
for x in fa bsa mla; do timeout 60 ejk run prof_$x.tmp.yaml --json $R/run_$x.json > $R/run_$x.txt 2>&1; cat $R/run_$x.txt | cut -c1-220; done
# one pass of every kernel with basic timing
timeout 120 ncu --section SpeedOfLight --launch-skip 0 --launch-count 12 ejk run prof_bsa.tmp.yaml > $R/sol_bsa.txt 2>&1
grep -E "^  [a-z_]+|Duration|Memory Throughput|Compute \(SM\)" $R/sol_bsa.txt | head -80
timeout 150 ncu --set full --import-source no -k regex:fa_dkdv --launch-skip 3 --launch-count 1 -o $R/fa ejk run prof_fa.tmp.yaml > $R/ncu_fa.log 2>&1; tail -3 $R/ncu_fa.log
ncu --import $R/fa.ncu-rep --page details > $R/fa_details.txt 2>&1; grep -E "Duration|Throughput|Registers|Occupancy|Stall|Warp Cycles|Issued|Eligible|Bank" $R/fa_details.txt | head -60
ncu --import $R/fa.ncu-rep --page source --csv --print-source sass > $R/fa_sass.csv 2>&1; wc -c $R/fa_sass.csv
timeout 100 ncu --set full -k regex:mla --launch-skip 4 --launch-count 4 -o $R/mla ejk run prof_mla.tmp.yaml > $R/ncu_mla.log 2>&1; tail -3 $R/ncu_mla.log
ncu --import $R/mla.ncu-rep --page details > $R/mla_details.txt 2>&1; grep -E "^  [a-z_]+|Duration|Memory Throughput|DRAM Throughput|Registers|Achieved Occupancy|Grid Size|Block Size" $R/mla_details.txt | head -60
cd $OUT && tar -czf r.tgz r && rm -rf r
