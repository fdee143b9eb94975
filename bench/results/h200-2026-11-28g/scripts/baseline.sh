# Baselines: mla_decode pass by pass on Vulkan, OpenCL and cuda (ejk run --passes) with ejk_bench's rows and copies; NSA forward and backward against dense causal flash attention on OpenCL, Vulkan and cuda (the paper's shape at 4096 tokens, bf16).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28g/scripts
export EJK_BENCH_TUNE_EVALS=0
for d in vulkan:0 opencl:0 cuda:0; do timeout 60 ejk --device $d run $S/mla.yaml --passes > $R/mla-passes-${d%:0}.txt 2>&1; cut -c1-160 $R/mla-passes-${d%:0}.txt; done
timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/(vulkan|opencl|cuda):0' > $R/mla.txt 2>&1; grep manual_time $R/mla.txt | cut -c1-150
timeout 200 ejk_bench --benchmark_filter='BM_nsa_fwd_gpu/(opencl|vulkan|cuda):0' > $R/nsa-fwd.txt 2>&1; grep manual_time $R/nsa-fwd.txt | cut -c1-170
cd $OUT && tar -czf r.tgz r && rm -rf r
