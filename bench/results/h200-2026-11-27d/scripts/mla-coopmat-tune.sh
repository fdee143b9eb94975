mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
EJK_LOG_TUNE=1 timeout 200 ejk tune mla-coopmat-tune.yaml --json $R/mla-tune.json > $R/mla-tune.txt 2>&1; grep -v "^ejk: measure" $R/mla-tune.txt | cut -c1-250 | tail -3
cd $OUT && tar -czf r.tgz r && rm -rf r
