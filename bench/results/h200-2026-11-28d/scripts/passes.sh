# ejk run --passes: flash attention's passes on NVIDIA's Vulkan and OpenCL (heuristic configs).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
for d in vulkan:0 opencl:0; do timeout 120 ejk --device $d run bench/results/h200-2026-11-28d/scripts/passes.yaml --passes --json $R/passes-${d%:0}.json > $R/passes-${d%:0}.txt 2>&1; cat $R/passes-${d%:0}.txt | cut -c1-60,120-200; done
cd $OUT && tar -czf r.tgz r && rm -rf r
