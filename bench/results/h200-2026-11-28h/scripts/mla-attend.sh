# mla_decode's Vulkan attend pass with q's fragments in shared memory (coop_q_shared) and two tiles' loads in flight (coop_loads_ahead): the tests, a tune of the coopmat configs at 8 and 16 parts, each of the four attend programs' SASS (4 subgroups, 8 parts).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28h/scripts
export EJK_BENCH_TUNE_EVALS=0
timeout 150 ejk_tests --gtest_filter='*MlaAttention*ulkan*' > $R/mla-tests.txt 2>&1; grep -E 'FAILED|Failure|PASSED' $R/mla-tests.txt | head
EJK_LOG_TUNE=1 timeout 250 ejk tune $S/mla-tune.yaml --json $R/tune.json > $R/tune.txt 2>&1; tail -1 $R/tune.txt | cut -c1-250
python3 $S/tune-sorted.py $R/tune.json 16 > $R/tune-sorted.txt 2>&1; cat $R/tune-sorted.txt
for q in 0 1; do for a in 1 2; do
  export EJK_CACHE_DIR=$(mktemp -d)
  sed "s/(splits == 8 || splits == 16)/splits == 8 \&\& coop_subgroups == 4 \&\& coop_q_shared == $q \&\& coop_loads_ahead == $a/" $S/mla-tune.yaml > /tmp/one.yaml
  timeout 60 ejk tune /tmp/one.yaml --json $R/one-q$q-a$a.json > /dev/null 2>&1
  echo "q_shared $q ahead $a"; bash bench/results/h200-2026-11-28g/scripts/sass-dump.sh $R/q$q-a$a 2>&1
done; done
cd $OUT && tar -czf r.tgz r && rm -rf r
