#!/bin/bash
# Real-size targets on a GPU machine (docs/benchmarks.md#real-sizes): wall time and peak host
# memory of `ejk run` per recipe, the Llama-3-8B recipes, and a 32-candidate flash attention
# tune (racing variants, then every candidate measured) with the driver's program cache empty
# (cold) and filled by the first tune (warm).
# usage: bench/real_sizes/run.sh OUT_FOLDER [DEVICE...]   (default devices: opencl:0 vulkan:0)
set -u
out=${1:?usage: run.sh OUT_FOLDER [DEVICE...]}
shift
devices=("${@:-opencl:0}")
[ $# -eq 0 ] && devices=(opencl:0 vulkan:0)
here=$(cd "$(dirname "$0")" && pwd)
recipes=$here/../../recipes
mkdir -p "$out"
m() { python3 "$here/measure.py" "$@" | tee -a "$out/output.txt"; }
export CUDA_CACHE_PATH=$out/.nv-cache EJK_CACHE_DIR=$out/.ejk-cache
m baseline-devices ejk -q devices > /dev/null
# Twice: the first pass builds every program (caches empty), the second finds them built.
for pass in cold warm; do
  for dev in "${devices[@]}"; do
    d=${dev/:/}
    for r in fa_fwd fa_bwd matmul page_attention_2g; do
      m "run-$r-$d-$pass" ejk --device "$dev" run "$here/$r.yaml" --json "$out/run-$r-$d-$pass.json" 2>&1 | tail -1
    done
  done
done
# With --check: the heuristic checked against the double reference at sampled elements.
for dev in "${devices[@]}"; do
  d=${dev/:/}
  for r in fa_fwd fa_bwd matmul page_attention_2g; do
    EJK_LOG_TUNE=1 m "run-$r-$d-check" ejk --device "$dev" run "$here/$r.yaml" --check --json "$out/run-$r-$d-check.json" \
      2> "$out/run-$r-$d-check.log" | tail -1
  done
done
for r in llama3-8b-prefill llama3-8b-decode; do
  m "run-$r" ejk run "$recipes/$r.yaml" --json "$out/run-$r.json" 2>&1 | tail -1
done
for dev in "${devices[@]}"; do
  d=${dev/:/}
  rm -rf "$CUDA_CACHE_PATH" "$EJK_CACHE_DIR/programs"
  for pass in cold warm; do
    EJK_LOG_TUNE=1 m "tune-$pass-$d" ejk -v --device "$dev" tune "$here/fa_fwd.yaml" --force --json "$out/tune-$pass-$d.json" \
      2> "$out/tune-$pass-$d.log" | tail -2
  done
done
# 32 candidates evaluated (no race): the tuner's throughput when every candidate is measured.
for dev in "${devices[@]}"; do
  d=${dev/:/}
  rm -rf "$CUDA_CACHE_PATH" "$EJK_CACHE_DIR/programs"
  for pass in cold warm; do
    EJK_LOG_TUNE=1 m "tune-norace-$pass-$d" ejk -v --device "$dev" tune "$here/fa_fwd.yaml" --race 0 --force \
      --json "$out/tune-norace-$pass-$d.json" 2> "$out/tune-norace-$pass-$d.log" | tail -2
  done
done
rm -rf "$CUDA_CACHE_PATH" "$EJK_CACHE_DIR"
grep '^{"label"' "$out/output.txt" > "$out/runs.jsonl"
# One archive: the machine hands back a limited number of files.
tar -C "$out" -czf "$out.tgz" . && rm -rf "$out"
