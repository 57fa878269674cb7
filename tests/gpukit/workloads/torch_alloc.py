"""PyTorch's caching allocator: tensors of several sizes, some deleted
(the cache keeps their segments), then torch.cuda.empty_cache(). The
compared figure is torch.cuda.memory_reserved(): what the allocator holds
from the driver. Run with and without
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (kit.py does both)."""
import torch

from checkpoint import checkpoint

MiB = 1 << 20


def figures():
    return {
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "segments": torch.cuda.memory_stats().get("segment.all.current", 0),
    }


def main():
    torch.cuda.init()
    sizes = [512, 1 * MiB, 3 * MiB + 123, 20 * MiB, 100 * MiB, 512 * MiB + 4096, 1024 * MiB]
    held = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in sizes]
    torch.cuda.synchronize()
    checkpoint("allocated", figures(), "reserved")
    del held[1::2]
    torch.cuda.synchronize()
    checkpoint("half deleted (cached)", figures(), "reserved")
    torch.cuda.empty_cache()
    checkpoint("empty_cache", figures(), "reserved")
    held.clear()
    torch.cuda.empty_cache()
    checkpoint("all freed", figures(), "reserved")


main()
