mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
timeout 60 python3 bench/results/h200-2026-11-27b/scripts/cublas.py > $R/peer.txt 2>&1; head -2 $R/peer.txt
timeout 200 ejk tune combos.yaml --json $R/combos.json > $R/combos.txt 2>&1; cut -c1-250 $R/combos.txt
P=$(mktemp -d); timeout 330 ejk --cache-dir $P tune recipes/profile.yaml --device vulkan:0 > $R/profile-tune.txt 2>&1; tail -3 $R/profile-tune.txt | cut -c1-200
ejk --cache-dir $P export --device vulkan:0 -o $R/nvidia-h200-vulkan.json > $R/export.txt 2>&1; cat $R/export.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
