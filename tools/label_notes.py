"""Backfill cuDNN numerical notes into profiles measured before the profiler recorded them (GPU host).

    python tools/label_notes.py assets/profiles/*.profile.json.gz

Each plan name is labelled once per file, on one (kernel, micro-batch) graph where it was profiled, by
engine.gpu.graphs.numerical_notes; the notes are written to every row of that name. The profile's
provenance records when and how.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.gpu import runtime  # noqa: E402
from engine.gpu.profiler import label_notes  # noqa: E402
from engine.kernels import KernelSignature  # noqa: E402
from engine.profile import Profile  # noqa: E402

ctx = runtime.context()
here = runtime.provenance()
for path in sys.argv[1:]:
    t0 = time.perf_counter()
    prof = Profile.load(path)
    if (prof.provenance["gpu"], prof.provenance["cudnn_version"]) != (here["gpu"], here["cudnn_version"]):
        print(f"skip {path}: measured on {prof.provenance['gpu']} cuDNN {prof.provenance['cudnn_version']}")
        continue
    t = prof.table
    labels: dict[str, str] = {}
    for (key, b), grp in t.groupby(["signature", "micro_batch"], sort=False):
        todo = [n for n in grp.plan.unique() if n not in labels]
        if todo:
            labels.update(label_notes(KernelSignature.from_key(key, int(b)), int(b), ctx, list(grp.plan)))
    t["numerical_notes"] = t.plan.map(labels).fillna("")
    prov = dict(prof.provenance, numerical_notes_labelled={"date": here["date"], "tool": "tools/label_notes.py",
                                                            "cudnn_version": here["cudnn_version"]})
    Profile(t, prov, prof.networks).save(path)
    tc = (t.numerical_notes.str.contains("TENSOR_CORE")).mean()
    nd = (t.numerical_notes.str.contains("NONDETERMINISTIC")).mean()
    print(f"{Path(path).name}: {len(labels)} plan names labelled in {time.perf_counter() - t0:.1f} s; rows with "
          f"TENSOR_CORE {tc:.0%}, NONDETERMINISTIC {nd:.0%}", flush=True)
