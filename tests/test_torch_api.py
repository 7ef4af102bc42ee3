"""The public PyTorch API on a CPU host: every mistake is one EngineError line, found before the cuDNN
frontend is loaded; a plan is checked against the model in hand (no rebuild from its name, no trust);
``optimize`` plans lazily per input shape, with the GPU side replaced by a fake (SYNTHETIC profiles,
engine.testing.synthetic) so its cache, switching, bounds and reports are tested here.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import engine.pytorch as api
from engine.errors import EngineError
from engine.planner import make_plan
from engine.testing.synthetic import synthetic_profile_of

torch = pytest.importorskip("torch")
nn = torch.nn

from engine.pytorch import apply as apply_mod  # noqa: E402
from engine.pytorch import checks  # noqa: E402
from engine.pytorch import autoplan as opt  # noqa: E402
from engine.pytorch.importer import import_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHAPE = (3, 32, 32)
USER = "examples.user_model:build"


def user_model():
    sys.path.insert(0, str(ROOT))
    try:
        from examples.user_model import build
    finally:
        sys.path.remove(str(ROOT))
    torch.manual_seed(0)
    return build()


def synthetic_plan(net, precision="tf32", layout="NCHW", budget="64MiB", mode="wr", policy="powerOfTwo"):
    """make_plan over SYNTHETIC rows for any network (the zoo helper builds zoo networks only)."""
    profile = synthetic_profile_of(net, policy, precision, layout, command="tests/test_torch_api.py")
    return profile, make_plan(profile, net, mode=mode, budget=budget, policy=policy, precision=precision, layout=layout)


def as_gpu_plan(plan):
    """The SYNTHETIC plan relabelled as measured on a GPU, so the checks after the SYNTHETIC refusal run."""
    return dataclasses.replace(
        plan,
        provenance={
            **plan.provenance,
            "profile": {"synthetic": False, "gpu": "NVIDIA H100 80GB HBM3", "cudnn_version": "9.19.0"},
        },
    )


@pytest.fixture(scope="module")
def user():
    """(model, its plan at b8 as a GPU plan, the plan file whose network is the user's torch name)."""
    model = user_model()
    net = import_model(model, SHAPE, 8, f"{USER}@3x32x32")
    return model, as_gpu_plan(synthetic_plan(net)[1])


@pytest.fixture()
def plan_file(user, tmp_path):
    path = tmp_path / "user.plan.json"
    user[1].save(path)
    return path


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, EngineError)
    return text


# --- the public wrappers forward exactly ------------------------------------------------------------


@pytest.mark.parametrize("name", ["optimize", "apply_plan", "remove_plan", "apply_memory_policy"])
def test_public_wrappers_have_the_implementations_signature(name):
    wrapper = getattr(api, name)
    module, _, attr = wrapper.implementation.rpartition(".")
    impl = getattr(__import__(module, fromlist=[attr]), attr)

    def shape(f):
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

    assert shape(wrapper) == shape(impl)


def test_wrappers_pass_keyword_arguments_through(monkeypatch):
    seen = {}
    monkeypatch.setattr(apply_mod, "apply_plan", lambda *a, **k: seen.update(args=a, kwargs=k) or "done")
    assert api.apply_plan("m", "p", workspace="per-call") == "done"
    assert seen == {"args": ("m", "p"), "kwargs": {"workspace": "per-call"}}


# --- apply_plan: one line per mistake, before cuDNN ---------------------------------------------------


@pytest.mark.parametrize(
    "plan,expected",
    [
        (None, "plan must be an engine.plan.Plan or the path of a plan file"),
        (123, "got int 123"),
        (b"{}", "got bytes"),
        ({"format": "ucudnn-explorer-plan"}, "got dict"),
        (["a"], "got list"),
        ("/nonexistent/plan.json", "does not exist"),
        (".", "is not a regular file"),
        ("/dev/zero", "is not a regular file"),
    ],
)
def test_malformed_plans_are_one_line(user, plan, expected):
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], plan)
    assert expected in one_line(err)


def test_a_plan_file_that_is_not_json_is_one_line(user, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the path as given: a long temporary folder (pytest-xdist's) would be cut short
    Path("bad.plan.json").write_text("{not json")
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], "bad.plan.json")
    assert "bad.plan.json" in one_line(err)


@pytest.mark.parametrize(
    "model,expected",
    [(None, "needs a torch.nn.Module, got NoneType"), ("resnet50", "got str 'resnet50'"), (42, "got int")],
)
def test_models_that_are_not_modules_are_one_line(user, model, expected):
    with pytest.raises(EngineError) as err:
        api.apply_plan(model, user[1])
    assert expected in one_line(err)


@pytest.mark.parametrize("shape", [(3, 32), (3, 32, 32, 1), (3, -1, 32), (3, 32.0, 32), (True, 32, 32), "3x32x32", 7])
def test_bad_input_shapes_are_one_line(user, shape):
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], user[1], input_shape=shape)
    assert "input_shape must be the per-sample input (C, H, W)" in one_line(err)


@pytest.mark.parametrize("workspace", ["bogus", 5, "ARENA"])
def test_bad_workspace_is_one_line(user, workspace):
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], user[1], workspace=workspace)
    assert "workspace must be 'arena', 'per-call' or None" in one_line(err)


@pytest.mark.parametrize("keep", ["no", 0, None])
@pytest.mark.parametrize("name", ["keep_stock", "graphs"])
def test_bad_switches_are_one_line(user, keep, name):
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], user[1], **{name: keep})
    assert f"{name} must be True or False" in one_line(err)


def test_a_synthetic_plan_is_refused(user):
    synthetic = dataclasses.replace(user[1], provenance={"profile": {"synthetic": True}})
    with pytest.raises(EngineError, match="SYNTHETIC profile"):
        api.apply_plan(user[0], synthetic)


def test_a_meta_model_is_one_line(user):
    with torch.device("meta"):
        meta = user_model()
    with pytest.raises(EngineError) as err:
        api.apply_plan(meta, user[1])
    assert "meta device" in one_line(err)


def test_a_model_on_several_devices_is_one_line(user):
    mixed = user_model()
    mixed.fc.to("meta")
    with pytest.raises(EngineError) as err:
        api.apply_plan(mixed, user[1])
    assert "several devices (cpu, meta)" in one_line(err)


def test_a_model_without_parameters_is_one_line(user):
    with pytest.raises(EngineError) as err:
        api.apply_plan(nn.ReLU(), user[1])
    assert "no parameters" in one_line(err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_a_cpu_model_on_a_cpu_host_says_there_is_no_gpu(user, plan_file):
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], plan_file)
    assert "this host has none" in one_line(err)


def test_a_missing_frontend_is_one_line_after_the_arguments(user, monkeypatch):
    """With every argument right and the model on a GPU, a host without the cuDNN frontend says so."""
    monkeypatch.setattr(checks, "model_device", lambda model, what="": torch.device("cuda", 0))
    monkeypatch.setattr(apply_mod, "ops", None)
    monkeypatch.setattr(apply_mod, "_NO_FRONTEND", "ModuleNotFoundError: No module named 'cudnn'", raising=False)
    with pytest.raises(EngineError) as err:
        api.apply_plan(user[0], user[1])
    assert "need the cuDNN frontend" in one_line(err) and ".[gpu]" in str(err.value)


def test_remove_plan_without_a_plan_is_one_line(user):
    with pytest.raises(EngineError) as err:
        api.remove_plan(user[0])
    assert "has no plan applied" in one_line(err)
    with pytest.raises(EngineError) as err:
        api.remove_plan(None)
    assert "remove_plan needs a torch.nn.Module" in one_line(err)


# --- the plan is checked against the model in hand --------------------------------------------------


def test_a_user_plan_is_checked_against_the_model_without_importing_its_name(user, plan_file, monkeypatch):
    """What apply_plan does before the GPU, in a process that never trusted the user's module: the
    plan's network name is not rebuilt (load_model would refuse it), the input shape comes from it."""
    from engine.pytorch import loader

    def refuse(*a, **k):
        raise AssertionError("the network was rebuilt from the plan's name")

    monkeypatch.setattr(loader, "load_model", refuse)
    monkeypatch.setattr(loader, "_TRUSTED", set())
    plan = checks.loaded_plan(plan_file)
    shape = checks.default_input_shape(plan)
    assert shape == SHAPE
    layers, matched, unplanned = checks.match_plan(plan, checks.conv_calls(user[0], torch.zeros(1, *shape)))
    assert [m[0] for m in matched] == ["stem", "grouped", "depthwise", "wide", "head"] and not unplanned
    assert set(layers["grouped"]) == {"F", "BD", "BF"} and set(layers["stem"]) == {"F", "BF"}


def test_a_user_plan_needs_no_trust_in_a_fresh_process(plan_file):
    """The README's lines in a new interpreter: the plan is read and checked against the model (here a
    CPU model, so it ends at the device check, not at a PlanFormatError about the plan's network)."""
    code = (
        "import torch, sys; sys.path.insert(0, '.'); from examples.user_model import build;"
        "from engine.pytorch import apply_plan;"
        f"apply_plan(build(), {str(plan_file)!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and last.startswith("engine.errors.EngineError: apply_plan"), last
    assert "the GPU first" in last or "this host has none" in last, last


def test_the_input_shape_defaults_from_the_plans_network():
    assert checks.default_input_shape(SimpleNamespace(network="pkg.m:build@1x28x28")) == (1, 28, 28)
    assert checks.default_input_shape(SimpleNamespace(network="torchvision:resnet50")) == (3, 224, 224)
    assert checks.default_input_shape(SimpleNamespace(network="alexnet")) == (3, 224, 224)
    with pytest.raises(EngineError, match="pass input_shape=") as err:
        checks.default_input_shape(SimpleNamespace(network="no-such-net"))
    one_line(err)


def test_a_plan_for_another_input_shape_does_not_match(user):
    other = import_model(user[0], (3, 48, 48), 8, "other")
    _, plan = synthetic_plan(other)
    with pytest.raises(EngineError, match="does not match this model: 5 planned layer"):
        checks.match_plan(plan, checks.conv_calls(user[0], torch.zeros(1, *SHAPE)))


def test_every_kernel_signature_is_checked_not_only_the_forwards(user):
    plan = user[1]
    k = next(k for k in plan.kernels if k.id == "grouped:BD")
    bad = dataclasses.replace(
        plan,
        kernels=[
            dataclasses.replace(k, signature=k.signature.replace("g4", "g2")) if k is k0 else k0 for k0 in plan.kernels
        ],
    )
    with pytest.raises(EngineError, match="plan kernel grouped:BD has signature"):
        checks.match_plan(bad, checks.conv_calls(user[0], torch.zeros(1, *SHAPE)))


def test_extra_convolutions_stay_stock_and_shared_ones_are_refused(user):
    extra = nn.Sequential(nn.Conv2d(3, 3, 1), user[0])
    _, matched, unplanned = checks.match_plan(user[1], checks.conv_calls(extra, torch.zeros(1, *SHAPE)))
    assert unplanned == ["0"] and len(matched) == 5
    conv = nn.Conv2d(3, 3, 3, padding=1)
    shared = nn.Sequential(conv, conv)
    with pytest.raises(EngineError, match="called more than once per forward"):
        checks.match_plan(user[1], checks.conv_calls(shared, torch.zeros(1, *SHAPE)))


def test_the_forwards_that_record_shapes_leave_cudnn_autotuning_off_and_restore_it(monkeypatch):
    """apply_plan's check forward and import_model's traced forwards only record shapes: with cudnn.benchmark on
    (as training scripts set it) cuDNN would first time its algorithms on each new shape (EfficientNet-B0: 10 s
    of apply_plan's 13 s on the H200); the user's setting is back afterwards, also after an error."""
    from torch._subclasses.fake_tensor import is_fake

    from engine.pytorch.importer import import_model

    seen, conv2d = [], torch.nn.functional.conv2d

    def spy(*args, **kwargs):  # each convolution the forwards run: autotuned? on fake tensors (no kernel)?
        out = conv2d(*args, **kwargs)
        seen.append((torch.backends.cudnn.benchmark, is_fake(out)))
        return out

    monkeypatch.setattr(torch.nn.functional, "conv2d", spy)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3))
    calls = checks.conv_calls(model, torch.zeros(1, 3, 8, 8))
    assert [(n, chw) for n, _, chw in calls] == [("0", (3, 8, 8)), ("2", (4, 6, 6))]
    assert seen == [(True, True)] * 2  # apply_plan's check runs no convolution: fake tensors, shapes only

    class Branchy(nn.Module):  # a data-dependent branch fake tensors cannot follow: a real forward, untuned
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3), nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return self.a(x) if x.sum() >= 0 else self.b(x)

    seen.clear()
    calls = checks.conv_calls(Branchy(), torch.zeros(1, 3, 8, 8))
    assert [(n, chw) for n, _, chw in calls] == [("a", (3, 8, 8))] and seen == [(False, False)]
    seen.clear()
    import_model(model, (3, 8, 8), 4, "spy")
    assert seen and all(s == (False, False) for s in seen) and torch.backends.cudnn.benchmark is True
    with pytest.raises(EngineError):
        checks.conv_calls(model, torch.zeros(1, 5, 8, 8))
    assert torch.backends.cudnn.benchmark is True


class _Caching(nn.Module):
    """A model that keeps tensors of its forward: an attribute, a buffer registered there, a list it appends to."""

    def __init__(self):
        super().__init__()
        self.conv, self.history = nn.Conv2d(3, 4, 3), []

    def forward(self, x):
        y = self.conv(x)
        self.last = y.mean()
        self.register_buffer("seen", y.amax())
        self.history.append(y.sum())
        return y


@pytest.mark.parametrize("make", [_Caching, lambda: nn.Sequential(nn.LazyConv2d(4, 3), nn.Conv2d(4, 4, 3))])
def test_the_check_forward_leaves_no_fake_tensor_in_a_model_that_keeps_one(make):
    """A forward that keeps a tensor on a module, or a lazy module materialising its weights, would keep fake
    tensors from apply_plan's check: the model is put back as it was and the check runs for real; the model then
    trains as before (CPU)."""
    from torch._subclasses.fake_tensor import is_fake

    model = make()
    hooks_before = [dict(m._forward_pre_hooks) for m in model.modules()]
    calls = checks.conv_calls(model, torch.zeros(1, 3, 8, 8))
    tensors = [*model.parameters(), *model.buffers(), *(v for m in model.modules() for v in vars(m).values())]
    assert not any(isinstance(t, torch.Tensor) and is_fake(t) for t in tensors)
    assert not any(is_fake(t) for t in getattr(model, "history", []))
    assert all(type(m).__name__ != "LazyConv2d" for m in model.modules())  # materialised by the real forward
    assert [chw for _, _, chw in calls][-1] == ((3, 8, 8) if isinstance(model, _Caching) else (4, 6, 6))
    if isinstance(model, _Caching):  # the check's hooks are gone from the very dicts they were put in
        assert [dict(m._forward_pre_hooks) for m in model.modules()] == hooks_before
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    assert all(p.grad is not None and not is_fake(p.grad) for p in model.parameters())


def test_a_model_that_cannot_run_the_input_shape_says_to_pass_one(user):
    with pytest.raises(EngineError) as err:
        checks.conv_calls(user[0], torch.zeros(1, 5, 32, 32))
    assert "pass the per-sample input_shape" in one_line(err)


# --- apply_memory_policy's arguments -------------------------------------------------------------------


@pytest.fixture(scope="module")
def memory_result(user):
    from engine.memory import plan_memory

    return plan_memory(import_model(user[0], SHAPE, 4, "user"), policy="vdnn-all-p")


@pytest.mark.parametrize(
    "case,expected",
    [
        ("model None", "needs a torch.nn.Module, got NoneType"),
        ("model str", "needs a torch.nn.Module, got str"),
        ("result None", "got NoneType"),
        ("result 42", "got int"),
        ("plan=42", "whose plan is a int"),
        ("result dict", "got dict"),
        ("example str", "example_input must be a torch.Tensor"),
    ],
)
def test_apply_memory_policy_arguments_are_one_line(user, memory_result, case, expected):
    model, result, example = user[0], memory_result, None
    if case.startswith("model"):
        model = None if case == "model None" else "user"
    elif case == "plan=42":
        result = dataclasses.replace(memory_result, plan=42)
    elif case.startswith("result"):
        result = {"result None": None, "result 42": 42, "result dict": {"plan": memory_result.plan}}[case]
    else:
        example = "x"
    with pytest.raises(EngineError) as err:
        api.apply_memory_policy(model, result, example)
    assert expected in one_line(err)


# --- optimize: arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        (dict(model=None), "optimize needs a torch.nn.Module"),
        (dict(model="resnet50"), "got str"),
        (dict(mode="fast"), "mode must be 'wr'"),
        (dict(budget="64XB"), "unknown unit"),
        (dict(budget=[1]), "invalid size"),
        (dict(mode="wd"), "mode='wd' needs budget="),
        (dict(mode="free", budget="1GiB"), "mode='free' takes no budget"),
        (dict(policy="fibonacci"), "unknown batch-size policy"),
        (dict(policy=[0, 2]), "positive integers"),
        (dict(engines="all"), "engines must be one of"),
        (dict(max_workspace="lots"), "invalid size"),
        (dict(cache=5), "cache must be the path"),
        (dict(workspace="heap"), "workspace must be"),
        (dict(max_shapes=0), "max_shapes must be a positive integer"),
        (dict(max_shapes=True), "max_shapes must be a positive integer"),
        (dict(progress=5), "progress must be True, False or a callable"),
        (dict(keep_stock="yes"), "keep_stock must be True or False"),
        (dict(graphs=1), "graphs must be True or False"),
        (dict(budget=64), "budget=64 is 64 bytes (a Python int counts bytes): write budget='64MiB'"),
        (dict(budget=64, mode="wd"), "budget=64 is 64 bytes"),
        (dict(budgte="64MiB"), "optimize() takes no keyword 'budgte' (did you mean 'budget'?)"),
        (dict(model=None, moed="wr"), "did you mean 'mode'?"),
    ],
)
def test_optimize_arguments_are_one_line(user, kwargs, expected):
    kwargs = {"model": user[0], **kwargs}
    with pytest.raises(EngineError) as err:
        api.optimize(**kwargs)
    assert expected in one_line(err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_optimize_on_a_cpu_host_says_there_is_no_gpu(user):
    with pytest.raises(EngineError) as err:
        api.optimize(user[0])
    assert "this host has none" in one_line(err)


# --- optimize: the lazy logic over a fake GPU side ------------------------------------------------------


class FakeGPU:
    """The GPU side of engine.pytorch.optimize: SYNTHETIC profiles through the real make_plan, and a plan
    "applied" by checking it against the model's convolution calls (the real checks)."""

    def __init__(self, fail_below: int | None = None):
        self.planned: list[tuple] = []
        self.attached = None
        self.switches = 0
        self.fail_below = fail_below

    def profile_and_plan(self, net, *, mode, budget, policy, precision, layout, progress, status=None, **_):
        if status:  # a long engine sweep's ETA, a tenth of the way in
            status({"done": 10, "total": 100, "eta_s": 900.0})
        if self.fail_below and net.batch < self.fail_below:
            raise EngineError(f"SYNTHETIC: no plan at b{net.batch}")
        profile, plan = synthetic_plan(net, precision, layout, budget, mode, policy)
        if progress:
            progress(1, 1, "SYNTHETIC")
        self.planned.append((net.batch, precision, layout))
        return SimpleNamespace(plan=plan, profile=profile, budget=budget, graphs=3, measured=0, seconds=0.0)

    def apply(self, model, plan, chw, workspace, keep_stock, graphs):
        calls = checks.conv_calls(model, torch.zeros(1, *chw))
        _, matched, unplanned = checks.match_plan(plan, calls)
        assert not unplanned
        self.attached = SimpleNamespace(plan=plan, chw=chw, workspace=workspace, keep_stock=keep_stock, graphs=graphs)
        return self.attached

    def detach(self, model):
        applied, self.attached = self.attached, None
        return applied

    def attach(self, model, applied):
        self.attached = applied
        self.switches += 1


@pytest.fixture()
def fake(monkeypatch):
    gpu = FakeGPU()
    monkeypatch.setattr(opt, "_check_host", lambda model: torch.device("cpu"))
    monkeypatch.setattr(opt, "_profile_and_plan", gpu.profile_and_plan)
    monkeypatch.setattr(opt, "_apply", gpu.apply)
    monkeypatch.setattr(opt, "_detach", gpu.detach)
    monkeypatch.setattr(opt, "_attach", gpu.attach)
    return gpu


def batch(n, hw=32):
    return torch.randn(n, 3, hw, hw)


def test_a_printed_optimize_names_the_heuristic_list_when_its_sweep_will_be_long(fake, capsys):
    for engines, progress, said in (("sweep", True, 1), ("heuristics", True, 0), ("sweep", False, 0)):
        model = user_model()
        api.optimize(model, budget="8MiB", engines=engines, progress=progress)
        model(batch(2))
        err = capsys.readouterr().err
        assert err.count("note: the engine sweep needs about 15 min more") == said, (engines, progress, err)
        assert ('engines="heuristics" times cuDNN' in err) == bool(said)


def test_nothing_is_planned_until_the_first_forward_then_once_per_shape(fake):
    model = user_model()
    auto = api.optimize(model, budget="8MiB", progress=False)
    assert model.ucudnn_auto is auto and fake.planned == []
    model(batch(8))
    model(batch(8))
    assert fake.planned == [(8, "tf32", "NCHW")]
    assert fake.attached.plan.budget == 8 * 2**20 and fake.attached.plan.batch == 8
    assert auto.current == ((8, 3, 32, 32), "tf32", "NCHW") and len(auto.history) == 1
    assert fake.attached.keep_stock is True  # apply_plan's default: layers the plan does not speed up stay stock
    assert fake.attached.graphs is True  # apply_plan's default: each kernel's pieces as CUDA graphs
    api.optimize(model, budget="8MiB", progress=False, keep_stock=False, graphs=False)
    model(batch(8))
    assert fake.attached.keep_stock is False and fake.attached.graphs is False


def test_a_new_shape_is_planned_and_an_old_one_switched_back_without_planning(fake):
    model = user_model()
    auto = api.optimize(model, progress=False)
    model(batch(8))
    model(batch(4))
    model(batch(8))
    assert fake.planned == [(8, "tf32", "NCHW"), (4, "tf32", "NCHW")]
    assert fake.switches == 1 and fake.attached.plan.batch == 8
    model(batch(4, 40))  # another image size is another shape
    assert fake.planned[-1] == (4, "tf32", "NCHW") and fake.attached.chw == (3, 40, 40)
    assert len(auto.plans) == 3


def test_the_per_shape_cache_is_bounded(fake):
    model = user_model()
    auto = api.optimize(model, max_shapes=2, progress=False)
    for n in (2, 4, 8):
        model(batch(n))
    assert [k[0][0] for k in auto.plans] == [4, 8]
    model(batch(2))  # evicted: planned again
    assert [p[0] for p in fake.planned] == [2, 4, 8, 2]


def test_precision_and_layout_follow_the_input(fake):
    model = user_model().to(memory_format=torch.channels_last)
    api.optimize(model, progress=False)
    old = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        model(batch(4).to(memory_format=torch.channels_last))
    finally:
        torch.backends.cudnn.allow_tf32 = old
    assert fake.planned == [(4, "fp32", "NHWC")]


def test_a_shape_that_cannot_be_planned_stays_stock_and_is_reported_once(monkeypatch):
    gpu = FakeGPU(fail_below=4)
    monkeypatch.setattr(opt, "_check_host", lambda model: torch.device("cpu"))
    monkeypatch.setattr(opt, "_profile_and_plan", gpu.profile_and_plan)
    monkeypatch.setattr(opt, "_apply", gpu.apply)
    monkeypatch.setattr(opt, "_detach", gpu.detach)
    monkeypatch.setattr(opt, "_attach", gpu.attach)
    model = user_model()
    auto = api.optimize(model, progress=False)
    model(batch(8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(batch(2))
        model(batch(2))
    assert len(caught) == 1 and "runs stock PyTorch convolutions: SYNTHETIC: no plan at b2" in str(caught[0].message)
    assert gpu.attached is None and auto.current is None  # the b8 plan is off while b2 runs stock
    assert list(auto.stock.values()) == ["SYNTHETIC: no plan at b2"]
    model(batch(8))
    assert gpu.switches == 1 and gpu.attached.plan.batch == 8


@pytest.mark.parametrize(
    "inputs,why",
    [
        ((torch.randn(4, 3, 32),), "input of 3 dimensions"),
        ((torch.randn(4, 3, 32, 32, dtype=torch.float64),), "dtype torch.float64"),
        ((torch.randn(4, 3, 32, 32, device="meta"),), "input on meta"),
    ],
)
def test_inputs_no_plan_covers_run_stock(fake, inputs, why):
    model = user_model().double() if inputs[0].dtype == torch.float64 else user_model()
    auto = api.optimize(model, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model(*inputs)
        except RuntimeError:
            pass  # the stock model itself may refuse the input; the planner must have said why first
    assert fake.planned == [] and any(why in str(w.message) for w in caught)
    assert any(why in r for r in auto.stock.values())


class _Branchy(nn.Module):
    """Python control flow on a tensor: torch.fx cannot trace it, so the import refuses the model."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3)

    def forward(self, x):
        y = self.a(x)
        if y.sum() > 0:
            y = y * 2
        return self.b(y)


def test_a_model_the_import_refuses_stays_stock(fake):
    model = _Branchy()
    auto = api.optimize(model, progress=False)
    with pytest.warns(UserWarning, match="runs stock PyTorch convolutions: cannot trace _Branchy"):
        model(batch(2))
    assert fake.planned == [] and auto.current is None


def test_remove_and_the_context_manager_put_stock_convolutions_back(fake):
    model = user_model()
    with api.optimize(model, progress=False) as auto:
        model(batch(2))
        assert fake.attached is not None
    assert fake.attached is None and "ucudnn_auto" not in model.__dict__ and not auto.plans
    model(batch(4))
    assert [p[0] for p in fake.planned] == [2]


def test_optimize_again_replaces_the_earlier_planner(fake):
    model = user_model()
    first = api.optimize(model, progress=False)
    model(batch(2))
    second = api.optimize(model, budget="1MiB", progress=False)
    assert model.ucudnn_auto is second and not first.plans
    model(batch(2))
    assert len(fake.planned) == 2 and fake.attached.plan.budget == 2**20


def test_progress_is_passed_through(fake):
    seen = []
    model = user_model()
    api.optimize(model, progress=lambda *a: seen.append(a))
    model(batch(2))
    assert seen == [(1, 1, "SYNTHETIC")]


# --- the shared profile-and-plan path, with a fake profiler ---------------------------------------------


def test_profile_and_plan_counts_what_it_measures_and_passes_the_profilers_progress_on(monkeypatch):
    """The profiler's own messages (engine.gpu.progress, led by its ETA) reach the caller as they are: a wrapper
    that matched them against bare graph labels counted nothing measured with the real profiler."""
    from engine.gpu import distributed, planning
    from engine.gpu.progress import ProfileProgress
    from engine.gpu.work import graphs

    net = import_model(user_model(), SHAPE, 4, "user")
    work = graphs(net, "powerOfTwo", "tf32", "NCHW")
    monkeypatch.setattr(planning, "missing", lambda net, **k: (len(work), {g.label for g in work[1:]}))
    now = [0.0]

    def profile_network(net, *, progress, policy, precision, layout, **_):
        track = ProfileProgress(work, progress, clock=lambda: now[0])  # as the real profilers report
        track.from_cache(work[:1])
        for g in work[1:]:
            now[0] += 1.0
            track.finished(g, "gpu0", 1.0)
        return synthetic_plan(net, precision, layout, policy=policy)[0]

    monkeypatch.setattr(distributed, "choose_profiler", lambda gpus, scheduler: profile_network)
    seen = []
    done = planning.profile_and_plan(net, mode="wr", budget="8MiB", progress=lambda *a: seen.append(a))
    assert (done.graphs, done.measured, done.budget) == (len(work), len(work) - 1, 8 * 2**20)
    assert seen[0] == (1, len(work), "ETA ? | 1 graphs from the cache")
    assert [m.split(" | ")[1] for _, _, m in seen[1:]] == [g.label for g in work[1:]]  # each graph measured
    assert all(m.startswith("ETA ") for _, _, m in seen) and seen[-1][:2] == (len(work), len(work))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
@pytest.mark.parametrize(
    "example", [["examples/train_with_plan.py", "--plan", "plan.json"], ["examples/optimize_user_model.py"]]
)
def test_the_training_examples_say_they_need_a_gpu(example):
    proc = subprocess.run([sys.executable, *example], cwd=ROOT, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: this example trains on a CUDA GPU and this host has none")
