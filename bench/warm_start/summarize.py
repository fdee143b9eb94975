#!/usr/bin/env python3
"""Evaluations to come within 5% of the best, cold against warm-started (bench/warm_start/run.sh).

usage: summarize.py FOLDER   (reads every NAME-cold.json with its NAME-warm.json)
"""
import json
import pathlib
import sys


def rows(path):
    return {b["name"]: b for b in json.loads(path.read_text())["benchmarks"] if b.get("evaluations")}


folder = pathlib.Path(sys.argv[1])
print("| recipe | workload | cold: evaluations to 5% | warm | warm start from | best cold / warm |")
print("|---|---|---|---|---|---|")
totals = {"cold": 0, "warm": 0, "n": 0, "started": 0, "started_cold": 0, "started_warm": 0}
for cold_path in sorted(folder.glob("*-cold.json")):
    recipe = cold_path.name[: -len("-cold.json")]
    warm_path = folder / f"{recipe}-warm.json"
    if not warm_path.exists():
        continue
    cold, warm = rows(cold_path), rows(warm_path)
    for name, c in cold.items():
        w = warm.get(name)
        if not w or not c.get("evaluations_to_near_best") or not w.get("evaluations_to_near_best"):
            continue
        source = w.get("warm_start", "")
        source = source[source.find("(") + 1 : -1] if source else "none"
        totals["cold"] += c["evaluations_to_near_best"]
        totals["warm"] += w["evaluations_to_near_best"]
        totals["n"] += 1
        if source != "none":
            totals["started"] += 1
            totals["started_cold"] += c["evaluations_to_near_best"]
            totals["started_warm"] += w["evaluations_to_near_best"]
        best = f'{c["real_time"]:.4g} / {w["real_time"]:.4g} {c.get("time_unit", "")}'
        print(f'| {recipe} | {name} | {c["evaluations_to_near_best"]} | {w["evaluations_to_near_best"]} | {source} | {best} |')
if totals["n"]:
    print()
    print(f'{totals["n"]} workloads ({totals["started"]} warm-started): {totals["cold"]} evaluations cold, '
          f'{totals["warm"]} warm, mean {totals["cold"] / totals["n"]:.2f} against {totals["warm"] / totals["n"]:.2f}; '
          f'over the warm-started ones {totals["started_cold"]} cold against {totals["started_warm"]} warm')
