"""Time a PyTorch training step: a small transformer encoder (4 layers,
d_model 512, batch 16 x 128 tokens), forward, backward and AdamW, with
PyTorch's caching allocator (`native`) or its stream-ordered one
(`cudaMallocAsync`: a cuMemAllocAsync + cuMemFreeAsync pair for most
tensors of a step, the calls gpumem's programs cost most on). Warms up
20 steps, then ROUNDS rounds of STEPS steps; prints one JSON line with
each round's milliseconds per step. run.sh runs it with each allocator
before the agent starts, while it runs and after it stops, so untraced,
traced and untraced again are measured side by side on one machine.
Without PyTorch or a GPU it prints why, and exits 0.

Usage: train_step.py LABEL ALLOCATOR [ROUNDS STEPS]
"""
import json
import os
import sys
import time

label, allocator = sys.argv[1], sys.argv[2]
rounds, steps = (int(a) for a in (sys.argv[3:5] or (3, 100)))
if allocator not in ("native", "cudaMallocAsync"):
    sys.exit(f"train_step.py: ALLOCATOR is native or cudaMallocAsync, not {allocator!r}")
# Read when the allocator starts, at the first CUDA allocation.
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = f"backend:{allocator}"
line = {"label": label, "allocator": allocator, "steps": steps}
try:
    import torch
except ImportError as e:
    print(json.dumps({**line, "skipped": f"no PyTorch: {e}"}))
    sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({**line, "skipped": "torch.cuda.is_available() is false"}))
    sys.exit(0)


def main():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 128, 512, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per_step.append(round((time.perf_counter_ns() - start) / steps / 1e6, 3))
    backend = torch.cuda.get_allocator_backend()
    print(json.dumps({**line, "backend": backend, "ms_per_step": per_step}))


main()
