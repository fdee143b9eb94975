mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
timeout 60 ejk run fa64.tmp.yaml --json $R/d64.json > $R/d64.txt 2>&1; cut -c1-20,100-330 $R/d64.txt
timeout 60 python3 fapeer64.tmp.py > $R/d64-fa2.txt 2>&1; cat $R/d64-fa2.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
