# The SASS of every Vulkan pipeline in $EJK_CACHE_DIR into $1/sass, with each one's counts of local-memory accesses, barriers and HMMA (run by mla-ring.sh and mla-loads.sh, and by ../../h200-2026-11-28h/scripts/mla-attend.sh and mla-merge.sh).
mkdir -p $1/sass
for f in $(grep -rl --binary-files=binary -F "$(printf '\x28\xb5\x2f\xfd')" $EJK_CACHE_DIR 2>/dev/null); do
  n=$(basename $f | cut -c1-16)
  NVDISASM=/usr/local/cuda/bin/nvdisasm python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $1/sass/$n.sass 2>&1 | head -1
  echo "  LDL/STL: $(grep -c 'LDL\|STL' $1/sass/$n.sass) BAR: $(grep -c 'BAR' $1/sass/$n.sass) HMMA: $(grep -c HMMA $1/sass/$n.sass)"
done
