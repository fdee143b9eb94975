# The Vulkan barrier between dispatches: compute and transfer stages (as built), compute only, none (EJK_TMP_BARRIER, an experimental build's knob).
mkdir -p .device && tar -C .device -xJf .devpack.tar.xz && . .device/env.sh >/dev/null; export EJK_CACHE_DIR=$(mktemp -d); R=$OUT/r; mkdir -p $R
S=bench/results/h200-2026-11-28h/scripts
export EJK_BENCH_TUNE_EVALS=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $R/gpu.txt
for m in full compute none full compute none; do
  export EJK_TMP_BARRIER=$m
  timeout 60 ejk --device vulkan:0 run $S/mla.yaml --passes > $R/mla-passes-$m.txt 2>&1; echo "$m"; tail -4 $R/mla-passes-$m.txt | cut -c1-20,125-170
  timeout 60 ejk --device vulkan:0 run $S/tiny.yaml --passes > $R/tiny-$m.txt 2>&1; tail -2 $R/tiny-$m.txt | cut -c1-20,100-200
  timeout 60 ejk_bench --benchmark_min_time=0.05 --benchmark_filter='BM_mla_decode_gpu/vulkan:0' > $R/mla-$m.txt 2>&1; grep manual_time $R/mla-$m.txt | cut -c1-150
done
for m in full compute; do export EJK_TMP_BARRIER=$m; timeout 90 ejk --device vulkan:0 run $S/decode.yaml --passes > $R/decode-passes-$m.txt 2>&1; cut -c1-40,100-200 $R/decode-passes-$m.txt; done
export EJK_TMP_BARRIER=compute
timeout 200 ejk_tests --gtest_filter='*MlaAttention*ulkan*:*Decode*ulkan*:*FlashAttention*ulkan*' > $R/tests-compute.txt 2>&1; grep -E 'FAILED|PASSED' $R/tests-compute.txt | head
timeout 60 ejk --device opencl:0 run $S/tiny.yaml --passes > $R/tiny-opencl.txt 2>&1; tail -2 $R/tiny-opencl.txt | cut -c1-20,100-200
timeout 60 ejk --device cuda:0 run $S/tiny.yaml > $R/tiny-cuda.txt 2>&1; tail -2 $R/tiny-cuda.txt | cut -c1-20,100-200
cd $OUT && tar -czf r.tgz r && rm -rf r
