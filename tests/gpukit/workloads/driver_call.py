"""One check for cuda-bindings' (CUresult, values...) tuples, shared by
the workloads that call the driver directly."""
from cuda.bindings import driver as cu


def check(result):
    """The call's value(s), or RuntimeError naming the CUresult."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"driver call failed: {err}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest
