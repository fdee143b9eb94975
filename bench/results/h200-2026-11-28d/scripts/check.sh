# The committed build's cooperative-matrix reference tests and refusals on the GPU.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
timeout 200 ejk_tests --gtest_filter='*FlashAttentionVulkan*:*FragmentRows*' > $R/check-tests.txt 2>&1; tail -3 $R/check-tests.txt; grep -m6 -A4 Failure $R/check-tests.txt | cut -c1-300
cd $OUT && tar -czf r.tgz r && rm -rf r
