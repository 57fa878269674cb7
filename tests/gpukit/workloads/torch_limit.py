"""A PyTorch process that grows by STEP bytes until something stops it.

After CUDA is up it checkpoints ("started", kit.py sets a limit on its pid
then), and after each step reports {"step": k, "reserved": ...} without
waiting. A `signal` limit should kill it at the step that crosses the
limit; run to MAX_STEPS it says so.

Usage: torch_limit.py STEP_BYTES MAX_STEPS
"""
import sys

import torch

from checkpoint import checkpoint, report


def main():
    step, max_steps = int(sys.argv[1]), int(sys.argv[2])
    torch.cuda.init()
    held = [torch.empty(1, dtype=torch.uint8, device="cuda")]
    torch.cuda.synchronize()
    checkpoint("started", {"reserved": torch.cuda.memory_reserved()}, "reserved")
    for k in range(1, max_steps + 1):
        held.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        report(step=k, reserved=torch.cuda.memory_reserved())
    report(finished=True)


main()
