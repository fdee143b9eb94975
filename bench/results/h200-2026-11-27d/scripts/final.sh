mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
timeout 200 ejk_tests --gtest_filter='All/Vulkan.CoopmatMatchesTheReference*:All/Vulkan.EveryScalarParameterValueRuns*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -B2 -A3 Failure $R/tests.txt | head -20
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/cublas.py > $R/peer.txt 2>&1; head -1 $R/peer.txt
timeout 90 ejk run run.yaml --json $R/heur.json > $R/heur.txt 2>&1; cut -c1-200 $R/heur.txt
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/fapeer.py > $R/fapeer.txt 2>&1; head -1 $R/fapeer.txt
EJK_LOG_TUNE=1 timeout 200 ejk tune fa-coopmat-tune.yaml --json $R/fa.json > $R/fa.txt 2>&1; grep -v "^ejk: measure" $R/fa.txt | cut -c1-250 | tail -3
cd $OUT && tar -czf r.tgz r && rm -rf r
