# native_sparse_attention's tensor-core forward with 2 or 4 warps and tiles of 16 or 32 keys: the tests on OpenCL and cuda, a tune of the four configs at 4096 and 16384 tokens.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
timeout 100 ejk_tests --gtest_filter='*NativeSparse*TensorCore*/opencl_0:*NativeSparse*TensorCore*/cuda_0' > $R/tests.txt 2>&1; grep -E 'OK|FAILED|Failure|PASSED' $R/tests.txt | head -20
EJK_LOG_TUNE=1 timeout 120 ejk tune $S/nsa-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -3 $R/tune.txt | cut -c1-250
python3 -c "
import json; d=json.load(open('$R/tune.json'))
for b in d['benchmarks']:
  print(b.get('workload', b.get('kernel')))
  for c in sorted(b['candidates'], key=lambda c: c.get('median_ns') or 1e18): print('  ', c.get('config'), c.get('median_ns'))" > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
