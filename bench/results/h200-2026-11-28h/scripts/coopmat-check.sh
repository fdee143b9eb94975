# The cooperative-matrix passes offered and passing after their device check moved to one helper (kernels/common/vulkan_coopmat.hpp): flash attention forward, the decode engine, mla_decode on Vulkan; and what the driver lists of cooperative matrices.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
vulkaninfo 2>/dev/null | grep -iE "cooperative|driverVersion|deviceName|VK_NV_shader_sm|apiVersion" | sort -u > $R/vulkaninfo.txt; cat $R/vulkaninfo.txt
timeout 200 ejk_tests --gtest_filter='*MlaAttention.VulkanCoopmat*/vulkan_0:*CooperativeMatrixPassMatchesReference/vulkan_0:*FlashAttentionVulkan.CooperativeMatrixForward*' > $R/tests.txt 2>&1; grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]' $R/tests.txt | cut -c1-120
cd $OUT && tar -czf r.tgz r && rm -rf r
