#!/usr/bin/env bash
# Distributed tuning speed-up: times `ejk tune RECIPE` under `mpirun -n 1` and `mpirun -n RANKS`
# on fresh caches, checks that both stored the same keys, and prints the wall-clock speed-up.
#   bench/distributed_tune.sh [RANKS] [RECIPE]      (defaults: 2, bench/distributed_tune.yaml)
# Environment: EJK (the ejk program, default build/apps/ejk/ejk), EJK_BENCH_DEVICE (default cpu),
# MPIRUN (default mpirun).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ranks=${1:-2}
recipe=${2:-$here/distributed_tune.yaml}
ejk=${EJK:-$here/../build/apps/ejk/ejk}
device=${EJK_BENCH_DEVICE:-cpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=("${MPIRUN:-mpirun}" --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then mpi+=(--allow-run-as-root); fi

# "wall cpu" seconds of one run on $1 ranks (cpu: user + system of every rank); its cache and
# log are kept under $work/$1. CPU seconds tell a real parallel gain from a larger share of a
# machine that other processes load.
tune_on() {
  local n=$1 TIMEFORMAT='%R %U %S' t
  t=$( { time EJK_CACHE_DIR=$work/$n EJK_PROFILE_DIR=$work/none "${mpi[@]}" -n "$n" "$ejk" tune "$recipe" \
           --device "$device" >"$work/$n.log" 2>&1; } 2>&1 ) || { cat "$work/$n.log" >&2; exit 1; }
  echo "$t" | awk '{printf "%.2f %.2f", $1, $2 + $3}'
}

# The cache's entries, one per line: kernel and signature (`ejk cache ls` prints number, kernel,
# median, unit, config and signature; the config is compact JSON).
keys() {
  "$ejk" --quiet --cache-dir "$work/$1" cache ls | awk '{s = $2; for (i = 6; i <= NF; ++i) s = s " " $i; print s}' | sort
}

load=$(cut -d' ' -f1-3 /proc/loadavg)
read -r one one_cpu <<<"$(tune_on 1)"
read -r many many_cpu <<<"$(tune_on "$ranks")"
if ! diff <(keys 1) <(keys "$ranks") >/dev/null; then
  echo "the $ranks-rank run stored other keys than the 1-rank run" >&2
  diff <(keys 1) <(keys "$ranks") >&2 || true
  exit 1
fi
entries=$(keys 1 | wc -l)
echo "recipe $recipe on $device: $entries invocations"
echo "load average before: $load"
echo "1 rank:  $one s wall, $one_cpu s cpu"
echo "$ranks ranks: $many s wall, $many_cpu s cpu"
echo "$one $many" | awk -v n="$ranks" '{printf "speed-up: %.2fx on %d ranks (efficiency %.0f%%)\n", $1 / $2, n, 100 * $1 / $2 / n}'
grep '^distributed over' "$work/$ranks.log" || true
