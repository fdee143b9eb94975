#!/usr/bin/env python3
"""Runs a command and prints its wall time and peak resident memory as one JSON line.

usage: measure.py LABEL COMMAND...   (peak RSS of the command's process tree, from getrusage)
"""
import json
import resource
import subprocess
import sys
import time

label, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
rc = subprocess.call(cmd)
wall = time.monotonic() - t0
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"label": label, "rc": rc, "wall_s": round(wall, 3), "peak_rss_mb": round(peak_kib / 1024, 1)}), flush=True)
sys.exit(rc)
