import torch, statistics, json
def t(fn, reps=30):
    for _ in range(5): fn()
    torch.cuda.synchronize(); ts=[]
    for _ in range(reps):
        a,b=torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True); a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
for dt in (torch.float16, torch.bfloat16):
    for (m,n,k) in ((4096,4096,4096),(4096,14336,4096)):
        a=torch.rand(m,k,device='cuda',dtype=dt)-0.5; b=torch.rand(k,n,device='cuda',dtype=dt)-0.5
        ms=t(lambda: a@b); print(json.dumps({"peer":"cublas","dtype":str(dt),"m":m,"n":n,"k":k,"ms":ms,"TFLOP/s":2*m*n*k/ms/1e9}))
