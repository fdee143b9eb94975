mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; R=$OUT/r; mkdir -p $R
export EJK_CACHE_DIR=$(mktemp -d)
timeout 150 ejk_tests --gtest_filter='*FlashAttentionVulkan*:*BlockSparseAttention*ulkan*' > $R/tests.txt 2>&1; tail -3 $R/tests.txt; grep -m6 -A4 Failure $R/tests.txt | cut -c1-300
EJK_LOG_TUNE=1 timeout 300 ejk tune bench/results/h200-2026-11-28e/scripts/rows32.yaml --json $R/rows.json > $R/rows.txt 2>&1; grep -v "ejk: measure" $R/rows.txt | cut -c1-400 | tail -4
python3 - <<'PY'
import json,os
d=json.load(open(os.environ['OUT']+'/r/rows.json'))
for b in d['benchmarks']:
  cs=sorted([c for c in b['candidates'] if c['status']=='ok'], key=lambda c:c['median_ns'])
  print(b['name'][:50], len(cs), 'failed', len([c for c in b['candidates'] if c['status']!='ok']))
  for c in cs[:8]: print('  %.2f ms'%(c['median_ns']/1e6), {k:v for k,v in c['config'].items() if k!='variant'})
PY
mkdir -p $R/sass; for f in $(find $EJK_CACHE_DIR -type f -size +30k); do NVDISASM=/usr/local/cuda/bin/nvdisasm timeout 30 python3 bench/results/h200-2026-11-27d/scripts/vulkan-sass.py $f $R/sass/$(basename $f | cut -c1-12).sass 2>&1 | head -1; done
cd $OUT && tar -czf r.tgz r && rm -rf r
