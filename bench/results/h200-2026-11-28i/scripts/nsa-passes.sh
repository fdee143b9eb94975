# native_sparse_attention's backward pass by pass on OpenCL (heuristic config), 4096 tokens.
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28i/scripts
timeout 120 ejk run $S/nsa-bwd.yaml --passes > $R/nsa-bwd-passes.txt 2>&1; cat $R/nsa-bwd-passes.txt | cut -c1-220
cd $OUT && tar -czf r.tgz r && rm -rf r
