mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
EJK_LOG_TUNE=1 timeout 330 ejk tune gemmtune.tmp.yaml > $R/gtune.txt 2>&1; tail -c 6000 $R/gtune.txt
timeout 90 ejk run mmrun.tmp.yaml --json $R/mmrun.json > $R/mmrun.txt 2>&1; cut -c1-20,100-300 $R/mmrun.txt
timeout 60 python3 peer.tmp.py > $R/peer.txt 2>&1; cat $R/peer.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
