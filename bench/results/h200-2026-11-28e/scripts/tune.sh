mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; R=$OUT/r; mkdir -p $R
export EJK_CACHE_DIR=$(mktemp -d)
timeout 60 ejk_tests --gtest_filter='*Vulkan.Coopmat*' > $R/tests.txt 2>&1; tail -2 $R/tests.txt
timeout 190 ejk tune bench/results/h200-2026-11-28e/scripts/mmtune.yaml --json $R/mmtune.json > $R/mmtune.txt 2>&1; tail -3 $R/mmtune.txt | cut -c1-300
timeout 380 ejk tune bench/results/h200-2026-11-28e/scripts/fatune.yaml --json $R/fatune.json > $R/fatune.txt 2>&1; tail -4 $R/fatune.txt | cut -c1-300
cd $OUT && tar -czf r.tgz r && rm -rf r
