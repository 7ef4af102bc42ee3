"""A new memory policy is its builder and one ``register`` line (docs/architecture.md): every reader takes what it
needs from the registry. The policy registered here is a throwaway: liveness under another name, declared to fill
the capacity and to be a static allocation PyTorch cannot run."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.errors import EngineError
from engine.memory import MEMORY_POLICIES, max_batch, plan_memory, smallest_capacity
from engine.memory import policies as P

GiB = 1 << 30
NAME = "test-throwaway"


def throwaway(inv, workspace: str = "fit"):
    """SYNTHETIC policy for this test: SuperNeurons' liveness analysis."""
    return P.liveness(inv, workspace)


@pytest.fixture
def registered():
    P.register(
        NAME,
        "superneurons",
        "superneurons",
        throwaway,
        "a throwaway policy (test)",
        fills_capacity=True,
        pytorch="static",
    )
    try:
        yield MEMORY_POLICIES[NAME]
    finally:
        del MEMORY_POLICIES[NAME]


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_a_new_policy_reaches_every_reader_from_its_registry_line(registered, capsys):
    res = plan_memory("alexnet", NAME, batch=16)
    assert res.policy == NAME and res.paper == "superneurons"
    assert res.peak == plan_memory("alexnet", "liveness", batch=16).peak
    # it declares that it fills the capacity: planned for (1 - reserve) of it in the pytorch convention
    reserved = plan_memory("alexnet", NAME, batch=16, capacity=2 * GiB, convention="pytorch")
    assert reserved.capacity == int(2 * GiB * 0.95)
    assert plan_memory("alexnet", "liveness", batch=16, capacity=2 * GiB, convention="pytorch").capacity == 2 * GiB
    assert max_batch("alexnet", NAME, 2 * GiB, convention="pytorch") == max_batch(
        "alexnet", "liveness", int(2 * GiB * 0.95), convention="pytorch"
    )
    assert NAME in smallest_capacity("alexnet", 16)

    assert main(["memory", "--network", "alexnet", "--batch", "16", "--policy", NAME, "--json"]) == 0
    assert _json(capsys)["policy"] == NAME
    assert (
        main(["memory", "--network", "alexnet", "--batch", "16", "--policy", "all", "--capacity", "4GiB", "--json"])
        == 0
    )
    assert NAME in [r["policy"] for r in _json(capsys)["results"]]
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--policy",
                f"liveness,sn-recompute,{NAME}",
                "--capacity",
                "2GiB",
                "--convention",
                "pytorch",
                "--max-batch",
                "--strategy",
                "speed",
                "--json",
            ]
        )
        == 0
    )
    rows = {r["policy"]: r["max_batch"] for r in _json(capsys)["rows"]}
    assert rows[NAME] < rows["liveness"]  # the reserve; --strategy goes only to policies that take one
    with pytest.raises(EngineError, match=f"memory policy '{NAME}' has no option 'strategy'; it takes workspace"):
        plan_memory("alexnet", NAME, batch=16, strategy="speed")


def test_the_pytorch_runtime_reads_how_to_run_a_policy_from_its_registry_line(registered):
    pytest.importorskip("torch")
    from engine.errors import MemoryRuntimeError
    from engine.pytorch.memory import executable

    res = plan_memory("alexnet", NAME, batch=16)
    with pytest.raises(MemoryRuntimeError, match=f"{NAME} cannot run in PyTorch: it is a framework's static"):
        executable(res.plan, res)
    notes = executable(plan_memory("alexnet", "liveness", batch=16, convention="pytorch").plan)
    assert any("autograd already frees" in n for n in notes)


def test_a_registry_line_is_checked():
    with pytest.raises(EngineError, match="pytorch must be one of runs, stock, static, aliasing"):
        P.register(NAME, "vdnn", "torch", throwaway, "bad", pytorch="maybe")
    with pytest.raises(EngineError, match="needs a builder or a search, not both or neither"):
        P.register(NAME, "vdnn", "torch", None, "bad")
    assert NAME not in MEMORY_POLICIES


def test_the_cli_reserve_is_a_share_of_the_capacity(capsys):
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "superneurons",
                "--capacity",
                "2GiB",
                "--reserve",
                "10%",
                "--json",
            ]
        )
        == 0
    )
    doc = _json(capsys)
    assert doc["capacity"] == int(2 * GiB * 0.9) and doc["reserve"] == pytest.approx(0.1)
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "superneurons",
                "--capacity",
                "2GiB",
                "--reserve",
                "1.5",
            ]
        )
        == 2
    )
    assert "--reserve '1.5' is not a share of the capacity" in capsys.readouterr().err
