mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
F='BM_nsa_bwd_gpu/opencl:0/(heuristic|dense_peer)'
for shape in 1,4096,64,4,128,16,64 1,16384,64,4,128,16,64; do
  EJK_BENCH_NSA_SHAPE=$shape timeout 70 ejk_bench --benchmark_filter="$F" > $R/new_$shape.txt 2>&1; grep "^BM_" $R/new_$shape.txt | cut -c1-190
  EJK_BENCH_NSA_SHAPE=$shape timeout 70 ./ejk_bench_old.tmp.bin --benchmark_filter="$F" > $R/old_$shape.txt 2>&1; grep "^BM_" $R/old_$shape.txt | cut -c1-190
done
cd $OUT && tar -czf r.tgz r && rm -rf r
