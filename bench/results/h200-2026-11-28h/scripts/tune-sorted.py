# Each benchmark of an `ejk tune --json` file: its candidates timed, the fastest first (the first
# argument, at most the second), then those that failed with why (run by mla-attend.sh, final.sh, mm-wg.sh).
import json, sys
d = json.load(open(sys.argv[1]))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 16
for b in d['benchmarks']:
    cs = b['candidates']
    ok = sorted((c for c in cs if 'median_ns' in c), key=lambda c: c['median_ns'])
    print(b.get('name', b.get('kernel')), '-', len(cs), 'candidates,', len(ok), 'timed')
    for c in ok[:top]: print('  ', c['config'], c['median_ns'])
    for c in cs:
        if 'median_ns' not in c: print('   failed', c['config'], c.get('status'), str(c.get('message', ''))[:300])
