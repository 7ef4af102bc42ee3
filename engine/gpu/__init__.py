"""GPU side: live cuDNN 9 profiling and micro-batched execution (CuPy + nvidia-cudnn-frontend).

Nothing here imports CuPy or cuDNN at module import time; ``available()`` says whether this
host can run GPU work and why not, so CPU-only paths (optimizers, dashboard, tests) never need them.
"""

from __future__ import annotations

from functools import lru_cache

ENGINES = ("sweep", "heuristics")  # profiling: cuDNN's heuristic list plus the engine sweep, or the list alone
KNOB_SAMPLES = 16  # knob settings per engine in the sweep, besides its defaults


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(True, GPU name) when CuPy sees a GPU and the cuDNN frontend loads; else (False, reason)."""
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not installed ({type(err).__name__}); install the 'gpu' extra on a GPU host"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return False, "no CUDA GPU is visible"
    except Exception as err:
        return False, f"no usable CUDA GPU: {err}"
    try:
        import cudnn

        cudnn.backend_version()
    except Exception as err:
        return False, f"the cuDNN frontend (nvidia-cudnn-frontend) does not load: {err}"
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return True, name.decode() if isinstance(name, bytes) else str(name)


def profile_network(*args, **kwargs):
    """See engine.gpu.profiler.profile_network."""
    from .profiler import profile_network as impl

    return impl(*args, **kwargs)


def verify_plan(*args, **kwargs):
    """See engine.gpu.verify.verify_plan."""
    from .verify import verify_plan as impl

    return impl(*args, **kwargs)
