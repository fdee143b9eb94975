import torch, time, json, subprocess, sys
a = torch.rand(4096, 4096, device='cuda', dtype=torch.float16); b = torch.rand(4096, 4096, device='cuda', dtype=torch.float16)
def one():
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); torch.cuda.synchronize(); return s.elapsed_time(e)
def clk():
    return subprocess.run(['nvidia-smi','--query-gpu=clocks.sm','--format=csv,noheader,nounits'],capture_output=True,text=True).stdout.strip()
one()
def phase(name, seconds, sleep):
    t0 = time.time(); ts = []
    while time.time() - t0 < seconds:
        ts.append((round(time.time() - t0, 3), round(one(), 3)))
        if sleep: time.sleep(sleep)
    # summarize per 100 ms bucket
    out = {}
    for t, v in ts:
        out.setdefault(int(t * 10), []).append(v)
    print(name, 'clk_end', clk(), ' '.join(f"{k/10:.1f}:{min(v):.3f}" for k, v in sorted(out.items())), flush=True)
time.sleep(6); print('idle clk', clk())
phase('busy-after-idle', 1.5, 0)
time.sleep(6)
phase('duty 10ms-sleep', 3, 0.010)
time.sleep(6)
phase('duty 50ms-sleep', 3, 0.050)
time.sleep(6)
phase('duty 150ms-sleep', 4, 0.150)
phase('busy-after-duty150', 1.5, 0)
time.sleep(1.0)
phase('busy-after-1s-idle', 0.5, 0)
time.sleep(3.0)
phase('busy-after-3s-idle', 0.5, 0)
