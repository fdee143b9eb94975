mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
EJK_LOG_TUNE=1 timeout 200 ejk tune fused_ok.tmp.yaml > $R/ok.txt 2>&1; tail -c 2500 $R/ok.txt
EJK_LOG_TUNE=1 timeout 300 ejk tune fused_tune.tmp.yaml > $R/tune.txt 2>&1; tail -c 5000 $R/tune.txt
timeout 60 python3 fapeer.tmp.py > $R/peer.txt 2>&1; cat $R/peer.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
