"""SYNTHETIC profiles for tests and benchmarks only: a made-up, deterministic time/workspace model.

Nothing user-facing reads these; every profile made here has ``provenance.synthetic = true`` and
file names starting with ``SYNTHETIC``. Four fake plans per kernel and size span the trade-off
real cuDNN plans show: no workspace and slow, up to a lot of workspace and fast, plus a fixed
per-call overhead so that tiny micro-batches are slow.
"""

from __future__ import annotations

import json

from ..kernels import KernelSignature
from ..policies import batch_sizes
from ..precision import DEFAULT_PRECISION, PRECISIONS
from ..profile import Profile
from ..units import MiB
from ..zoo import get_network

# names in cuDNN's form eng<id>_k<knob>=<value>, which profiles and plans check against engine id and knobs
GEMM, PRE, FFT, TC = "eng0", "eng1_k2=1", "eng2_k2=2", "eng3_k2=3"
# name: (TFLOP/s, fixed overhead ms, workspace bytes per sample-channel-pixel factor, fixed workspace)
_PLANS = {
    GEMM: (2.0, 0.004, 0.0, 0),
    PRE: (6.0, 0.006, 0.0, 1 * MiB),
    FFT: (15.0, 0.010, 8.0, 0),
    TC: (40.0, 0.012, 24.0, 4 * MiB),
}


def synthetic_rows(sig: KernelSignature, sizes) -> list[dict]:
    rows = []
    for b in sizes:
        s = sig.with_batch(b)
        for rank, (name, (tflops, overhead, ws_factor, ws_fixed)) in enumerate(_PLANS.items()):
            t = s.flops / (tflops * 1e9) + overhead
            ws = int(ws_factor * b * (s.c + s.k) * s.h * s.w) + ws_fixed
            rows.append(
                dict(
                    signature=sig.key,
                    micro_batch=b,
                    plan=name,
                    engine_id=rank,
                    knobs=_knobs(name),
                    heuristic_rank=3 - rank,
                    workspace=ws,
                    time_ms=t,
                    time_min_ms=t * 0.98,
                    time_max_ms=t * 1.03,
                    repeats=5,
                    status="ok",
                    reason="",
                    numerical_notes="",
                    behavior_notes="",
                )
            )
    return rows


def _knobs(name: str) -> str:
    """The knobs a plan name spells, as the profile's JSON column holds them."""
    return json.dumps({k: int(v) for k, v in (p.split("=") for p in name.split("_k")[1:])})


def synthetic_profile(
    network: str = "alexnet",
    batch: int = 256,
    policy: str = "powerOfTwo",
    precision: str = DEFAULT_PRECISION,
    layout: str | None = None,
) -> Profile:
    """Every kernel of ``network`` at the policy's sizes; ``layout`` defaults to the precision's."""
    return synthetic_profile_of(get_network(network, batch), policy, precision, layout)


def synthetic_profile_of(
    net,
    policy: str = "powerOfTwo",
    precision: str = DEFAULT_PRECISION,
    layout: str | None = None,
    command: str = "engine/testing/synthetic.py",
) -> Profile:
    """Every kernel of the Network ``net`` (any network, not only the zoo's) at the policy's sizes."""
    layout = layout or PRECISIONS[precision].layout
    rows = []
    for key in net.unique_kernels(precision, layout):
        rows += synthetic_rows(KernelSignature.from_key(key, net.batch), batch_sizes(policy, net.batch))
    prov = {
        "synthetic": True,
        "gpu": "SYNTHETIC (no GPU; unit-test model)",
        "driver": "-",
        "cudnn_version": "-",
        "frontend_version": "-",
        "date": "-",
        "command": command,
    }
    nets = [dict(name=net.name, batch=net.batch, precision=precision, layout=layout, policy=policy)]
    return Profile.from_records(rows, prov, nets)


def engine_set_profile() -> Profile:
    """SYNTHETIC AlexNet b32: TC marked as found by the engine sweep, FFT as NONDETERMINISTIC, so each
    engine set (all, heuristics, deterministic) leaves a different plan out."""
    p = synthetic_profile("alexnet", 32, "powerOfTwo")
    t = p.table.copy()
    t.loc[t.plan == TC, "heuristic_rank"] = -1
    t.loc[t.plan == FFT, "numerical_notes"] = "TENSOR_CORE|NONDETERMINISTIC"
    return Profile(t, p.provenance, p.networks)
