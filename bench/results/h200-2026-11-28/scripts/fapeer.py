import torch, statistics, json
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
def t(fn, reps=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); ts=[]
    for _ in range(reps):
        a,b=torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True); a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
B,H,S,D=4,16,4096,128
for causal in (False, True):
    flops=4*B*H*S*S*D/(2 if causal else 1)
    q,k,v=(torch.randn(B,H,S,D,device='cuda',dtype=torch.float16) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms=t(lambda: F.scaled_dot_product_attention(q,k,v,is_causal=causal))
    print(json.dumps({"peer":"FA2 fwd","causal":causal,"ms":ms,"TFLOP/s":flops/ms/1e9}))
    qg,kg,vg=(x.clone().requires_grad_() for x in (q,k,v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o=F.scaled_dot_product_attention(qg,kg,vg,is_causal=causal)
    do=torch.randn_like(o)
    ms=t(lambda: torch.autograd.grad(o,(qg,kg,vg),do,retain_graph=True))
    print(json.dumps({"peer":"FA2 bwd","causal":causal,"ms":ms,"TFLOP/s":2.5*flops/ms/1e9}))
