#!/bin/bash
# Warm-started tuning against cold (docs/tuning.md, "Warm starts"): each recipe tuned twice in
# the recipe's order, each time from an empty persistent cache, with the recipe's strategy, budget
# and seed: `--cold` (every search from the heuristic alone) and by default (each workload also
# from the config of the nearest workload tuned before it, or the profile tier's). summarize.py
# counts, per workload, the evaluations until the first within 5% of the best that run found.
# usage: bench/warm_start/run.sh OUT_FOLDER DEVICE RECIPE...
set -u
out=${1:?usage: run.sh OUT_FOLDER DEVICE RECIPE...}
device=${2:?usage: run.sh OUT_FOLDER DEVICE RECIPE...}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for recipe in "$@"; do
  name=$(basename "$recipe" .yaml)
  for mode in cold warm; do
    flag=()
    [ "$mode" = cold ] && flag=(--cold)
    EJK_CACHE_DIR=$(mktemp -d) ejk -q --device "$device" tune "$recipe" --force "${flag[@]}" \
      --json "$out/$name-$mode.json" > /dev/null 2> "$out/$name-$mode.log" || echo "ejk tune $recipe ($mode) failed" >&2
  done
done
python3 "$here/summarize.py" "$out" | tee "$out/summary.md"
