mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/cublas.py > $R/peer.txt 2>&1; cat $R/peer.txt
timeout 90 ejk run run.yaml --json $R/heur.json > $R/heur.txt 2>&1; cut -c1-200 $R/heur.txt
EJK_LOG_TUNE=1 timeout 280 ejk tune tune66.yaml --json $R/tune.json > $R/tune.txt 2>&1; grep -v "^ejk: measure" $R/tune.txt | tail -c 3000; grep -c spin-up $R/tune.txt
timeout 90 ejk run run.yaml > $R/after.txt 2>&1; cut -c1-200 $R/after.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
