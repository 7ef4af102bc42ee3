import json
import engine.gpu.verify as V
from engine.planner import make_plan
from engine.profile import Profile, resolve_profile
from engine.zoo import get_network

for net, b, pn in (
    ("vgg16", 64, "h100-vgg16-b64-tf32-nchw-powerOfTwo"),
    ("densenet40", 256, "h100-densenet40-b256-tf32-nchw-powerOfTwo"),
):
    plan = make_plan(
        Profile.load(resolve_profile(pn)), get_network(net, b), mode="wr", budget=64 << 20, policy="powerOfTwo"
    )
    rep = V.verify_plan(plan, repeats=1)
    print(
        json.dumps(
            {
                "net": net,
                "all_passed": rep["totals"]["all_passed"],
                "failed": rep["totals"]["failed"],
                "max_rel": max(k["rel_l2"] for k in rep["kernels"]),
                "n": len(rep["kernels"]),
            }
        ),
        flush=True,
    )
