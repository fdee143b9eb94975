mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
(time timeout 200 ejk_tests --gtest_filter='*Matmul*opencl_0*:*GroupedMatmul*opencl_0*:*MatmulOpenCL*') > $R/matmul-tests.txt 2>&1; grep -E "FAILED|PASSED|real|Failure" $R/matmul-tests.txt | head
(time timeout 330 ejk_tests --gtest_filter='*FlashAttentionOpenCL.TensorCoreVariantMatchesTheReference/opencl_0:*BlockSparse*opencl_0*') > $R/fa-tests.txt 2>&1; grep -E "FAILED|PASSED|real|Failure|OK \]" $R/fa-tests.txt | head -30
cd $OUT && tar -czf r.tgz r && rm -rf r
