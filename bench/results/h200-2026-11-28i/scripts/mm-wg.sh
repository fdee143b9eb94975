# matmul f16 on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2, variant coopmat_wg): cuBLAS, the heuristic (coopmat), a tune of the variant's configs at 4096³, then the tests, in one call.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28h/scripts
timeout 40 python3 bench/results/h200-2026-11-27b/scripts/cublas.py > $R/cublas.txt 2>&1; head -1 $R/cublas.txt
timeout 30 ejk run $S/mm.yaml > $R/heuristic.txt 2>&1; tail -1 $R/heuristic.txt | cut -c1-200
EJK_LOG_TUNE=1 timeout 120 ejk tune $S/mm-wg-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -2 $R/tune.txt | cut -c1-250
python3 $S/tune-sorted.py $R/tune.json 12 > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
timeout ${TEST_S:-120} ejk_tests --gtest_filter='*WorkgroupCoopmat*/vulkan_0' > $R/tests.txt 2>&1; tail -3 $R/tests.txt | cut -c1-200; grep -m4 -A6 Failure $R/tests.txt | cut -c1-400
cd $OUT && tar -czf r.tgz r && rm -rf r
