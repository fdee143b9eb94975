# Disassembles the SASS inside an ejk Vulkan program-cache file (NVIDIA driver): zstd blob -> NVuc container -> raw SM90 code.
import subprocess, sys, re, collections
import os
ND = os.environ.get('NVDISASM', 'nvdisasm')  # any CUDA toolkit's (pip: nvidia-cuda-nvdisasm)
f, out = sys.argv[1], sys.argv[2]
d = open(f, 'rb').read()
i = d.find(bytes.fromhex('28b52ffd'))
open('/tmp/_b.zst', 'wb').write(d[i:])
subprocess.run(['zstd', '-q', '-d', '-f', '/tmp/_b.zst', '-o', '/tmp/_b.raw'], check=True)
raw = open('/tmp/_b.raw', 'rb').read()
start = None
for s in range(8, 8000, 8):
    open('/tmp/_c.bin', 'wb').write(raw[s:s + 16 * 24])
    r = subprocess.run([ND, '-b', 'SM90', '/tmp/_c.bin'], capture_output=True, text=True)
    if not r.stderr and 'S2R' in r.stdout[:2000]:
        start = s; break
exits = [j for j in range(start, len(raw) - 8, 16) if raw[j:j + 8] == bytes.fromhex('4d79000000000000')]
end = exits[-1] + 16
open('/tmp/_c.bin', 'wb').write(raw[start:end])
r = subprocess.run([ND, '-b', 'SM90', '/tmp/_c.bin'], capture_output=True, text=True)
open(out, 'w').write(r.stdout)
ops = collections.Counter(re.findall(r'^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)', r.stdout, re.M))
regs = max([int(x) for x in re.findall(r'\bR(\d+)\b', r.stdout)] or [0])
print(f.split('/')[-1][:12], 'instructions', sum(ops.values()), 'max reg R%d' % regs)
print('  ', ' '.join(f"{k}:{v}" for k, v in sorted(ops.items(), key=lambda x: -x[1])[:45]))
