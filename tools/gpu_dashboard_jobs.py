"""The dashboard's GPU actions on a real GPU, without a browser (GPU host; Panel itself is not needed).

Drives dashboard.jobs.JobRunner exactly as the "Verify plan on GPU" and "Profile on GPU" buttons do
(dashboard/views/gpu.py): verify the plan the default PlannerState shows, feed the report back into
the state (measured times in the summary and timeline), then start a profile and cancel it.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dashboard.jobs import JobRunner  # noqa: E402
from dashboard.state import PlannerState  # noqa: E402
from engine.gpu import profile_network, verify_plan  # noqa: E402
from engine.zoo import get_network  # noqa: E402


def wait(runner, timeout=300):
    t0 = time.time()
    while runner.running and time.time() - t0 < timeout:
        time.sleep(0.05)
    runner.join(5)


state = PlannerState()
plan = state.make_plan()
print(
    f"state: profile {state.profile}, {state.network} b{state.batch} {state.mode} {state.policy} budget {state.budget}"
)
runner = JobRunner()
seen = []
runner.param.watch(lambda e: seen.append(e.new), "progress")
runner.start("verify", lambda progress, should_stop: verify_plan(plan, progress=progress, should_stop=should_stop))
wait(runner)
report = runner.result
print(
    f"verify job: status {runner.status}, progress updates {len(seen)}, last {runner.progress}%, error {runner.error!r}"
)
assert runner.status == "done", runner.error
t = report["totals"]
print(f"  all passed {t['all_passed']}, measured {t['measured_ms']:.2f} ms vs predicted {t['predicted_ms']:.2f} ms")
state.set_verification(report)
print(
    f"  state after set_verification: verified {state.verified}, measured kernels {len(state.measured or {})}, "
    f"summary {json.dumps(state.result.summary, default=str)[:300]}"
)

cache = Path(tempfile.mkdtemp()) / "c.sqlite"
net = get_network("alexnet", 256)


def profile_work(progress, should_stop):
    return profile_network(net, policy="powerOfTwo", cache_path=str(cache), progress=progress, should_stop=should_stop)


runner.start("profile", profile_work)
time.sleep(3)
runner.cancel()
wait(runner)
print(f"profile job cancelled after 3 s: status {runner.status}, error {runner.error!r}, progress {runner.progress}%")
assert runner.status == "cancelled"
print("OK")
