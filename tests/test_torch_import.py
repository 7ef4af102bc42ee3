"""PyTorch models imported as Networks (engine.pytorch): the five torchvision models against the zoo,
the conv parameters the kernels need, network names that round-trip, and one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.errors import ModelImportError, SpecError
from engine.kernels import KernelKind
from engine.memory import plan_memory
from engine.pytorch.importer import import_model
from engine.netnames import canonical_name, is_torch_name, split_name, with_input
from engine.pytorch.loader import load_model, trust
from engine.zoo import default_batch, get_network

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
nn = torch.nn

ROOT = Path(__file__).resolve().parent.parent
FIVE = ("alexnet", "resnet18", "resnet50", "vgg16", "googlenet")


def imported(module, shape=(3, 16, 16), batch=4, name="m"):
    return import_model(module, shape, batch, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", FIVE)
def test_torchvision_matches_zoo(name):
    net, zoo = get_network(f"torchvision:{name}", 8), get_network(name, 8)
    assert [k.signature for k in net.kernels()] == [k.signature for k in zoo.kernels()]
    assert [k.kind for k in net.kernels()] == [k.kind for k in zoo.kernels()]
    assert net.param_count == zoo.param_count
    assert len(net.conv_layers()) == len(zoo.conv_layers())
    # conv layers are the modules' qualified names, as apply_plan needs
    model, _ = load_model(f"torchvision:{name}", device="meta")
    for layer in net.conv_layers():
        assert isinstance(model.get_submodule(layer.name), nn.Conv2d)
    assert net.layers[-1].op == "softmax" and net.layers[-1].name == "prob"


@pytest.mark.parametrize("name", ("resnet18", "googlenet"))
def test_whole_graph_matches_zoo(name):
    """Where the zoo has no extra layers (AlexNet and VGG have no identity adaptive pool), every layer's
    op, shape and parameters agree, so the memory planner sees the same step."""
    net, zoo = get_network(f"torchvision:{name}", 4), get_network(name, 4)
    assert [(x.op, x.out_shape) for x in net.layers] == [(x.op, x.out_shape) for x in zoo.layers]
    assert [x.params for x in net.layers] == [x.params for x in zoo.layers]


def test_memory_planner_on_imported_resnet50():
    for policy in ("liveness", "superneurons"):
        ours = plan_memory(get_network("torchvision:resnet50", 16), policy)
        assert ours.peak == plan_memory(get_network("resnet50", 16), policy).peak > 0


def test_first_conv_needs_no_input_gradient():
    kinds = [k.kind for k in get_network("torchvision:alexnet", 2).kernels() if k.layer == "features.0"]
    assert kinds == [KernelKind.FORWARD, KernelKind.BACKWARD_FILTER]


def test_conv_parameters_recorded():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.Conv2d(8, 8, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=4, bias=False),
        nn.Conv2d(8, 6, 3, padding="same", dilation=2),
        nn.Conv2d(6, 6, 2, padding="valid"),
    )
    net = imported(model)
    p = net.layer("1").params
    assert (
        p["r"],
        p["s"],
        p["stride_h"],
        p["stride_w"],
        p["pad_h"],
        p["pad_w"],
        p["dil_h"],
        p["dil_w"],
        p["groups"],
        p["bias"],
    ) == (3, 5, 2, 1, 1, 2, 1, 2, 4, False)
    assert (net.layer("2").params["pad_h"], net.layer("2").params["pad_w"]) == (2, 2)
    assert net.layer("3").params["pad_h"] == 0 and net.layer("3").out_shape == (6, 7, 11)
    assert net.param_count == sum(q.numel() for q in model.parameters())


def test_bn_without_affine_and_functional_ops():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 1)
            self.bn = nn.BatchNorm2d(8, affine=False)
            self.fc = nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            y = torch.cat([torch.relu(self.a(x)), self.b(x)], 1)
            y = torch.nn.functional.max_pool2d(self.bn(y), 2)
            y = torch.nn.functional.dropout(y.view(y.size(0), -1), 0.3)
            return self.fc(y)

    net = imported(Net(), (3, 8, 8))
    assert [x.op for x in net.layers] == [
        "data",
        "conv",
        "relu",
        "conv",
        "concat",
        "bn",
        "pool",
        "dropout",
        "fc",
        "softmax",
    ]
    assert net.layer("bn").param_count == 0
    assert net.param_count == sum(q.numel() for q in Net().parameters())
    assert net.layer("dropout").params["p"] == 0.3


def test_model_ending_in_softmax_gets_no_second_loss():
    net = imported(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 14 * 14, 5), nn.Softmax(dim=1)))
    assert [x.op for x in net.layers][-2:] == ["fc", "softmax"]


def test_asymmetric_same_padding_refused():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 4, padding="same"))
    with pytest.raises(ModelImportError, match=r"Conv2d at 1 \(padding='same' with kernel 4x4.*asymmetric"):
        imported(model)


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.act = nn.Conv2d(3, 4, 3), nn.GELU()

    def forward(self, x):
        return self.act(self.conv(x)) * 2


def test_other_ops_become_generic_layers():
    """GELU and a multiply by a scalar, once refused, are generic layers carrying what PyTorch did."""
    net = imported(Custom())
    assert [x.op for x in net.layers] == ["data", "conv", "generic", "generic", "softmax"]
    gelu, mul = net.layer("act"), net.layer("mul")
    assert gelu.params["op"] == "GELU" and gelu.params["saves"] == ["X0"] and gelu.params["alias"] is None
    assert mul.params["op"] == "_operator.mul" and mul.out_shape == (4, 14, 14)
    assert not gelu.params["checkpoint"] and net.param_count == 4 * 3 * 9 + 4


@pytest.mark.parametrize(
    "model,message", [(nn.Sequential(nn.Conv2d(3, 4, 3, padding_mode="reflect")), "padding_mode='reflect'")]
)
def test_inexpressible_layers_refused(model, message):
    with pytest.raises(ModelImportError, match=message):
        imported(model)


@pytest.mark.parametrize(
    "model,shape",
    [
        (nn.Sequential(nn.MaxPool2d((2, 3))), (3, 8, 5)),  # stride 2x3: not the Network's square pool
        (nn.Sequential(nn.AdaptiveAvgPool2d(5)), (3, 5, 5)),  # uneven windows
        (nn.Sequential(nn.Conv2d(3, 4, 3), nn.Linear(14, 2)), (4, 14, 2)),  # a Linear over the last dim
    ],
)
def test_forms_the_own_layers_cannot_express_are_generic(model, shape):
    net = imported(model)
    assert net.layers[-2].op == "generic" and net.layers[-2].out_shape == shape


def test_shared_and_frozen_weights_refused():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x):
            return self.conv(self.conv(x))

    with pytest.raises(ModelImportError, match="conv .*called 2 times"):
        imported(Shared())
    tied = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1))
    tied[1].weight = tied[0].weight
    with pytest.raises(ModelImportError, match=r"Parameter at 1.weight \(the same tensor as 0.weight\)"):
        imported(tied)
    with pytest.raises(ModelImportError, match="mini-batch size must be a positive integer, got 0"):
        imported(nn.Sequential(nn.ReLU()), batch=0)
    frozen = nn.Sequential(nn.Conv2d(3, 4, 3))
    frozen[0].weight.requires_grad_(False)
    with pytest.raises(ModelImportError, match=r"frozen parameters \(weight\)"):
        imported(frozen)


def test_trace_failure_is_one_line():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(
        ModelImportError,
        match=r"cannot trace m with torch.fx at test_torch_import.py:\d+ in forward "
        r"`return x if x.sum\(\) > 0 else -x` \(symbolically",
    ) as info:
        imported(Branchy())
    assert "\n" not in str(info.value)


def test_train_mode_restored():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Dropout())
    imported(model)
    assert all(m.training for m in model.modules())


# --------------------------------------------------------------------------------------- names


def test_names_round_trip():
    assert is_torch_name("torchvision:resnet50") and is_torch_name("pkg.mod:build@3x32x32")
    assert not is_torch_name("resnet50") and not is_torch_name("nets/a.yaml")
    assert split_name("torchvision:vgg16@3x64x64") == ("torchvision:vgg16", (3, 64, 64))
    assert canonical_name("torchvision:vgg16", (3, 224, 224)) == "torchvision:vgg16"
    assert with_input("torchvision:vgg16@3x64x64", "1x32x48") == "torchvision:vgg16@1x32x48"
    net = get_network("torchvision:resnet18@3x112x112", 3)
    assert net.name == "torchvision:resnet18@3x112x112" and net.layer("data").out_shape == (3, 112, 112)
    again = get_network(net.name, 3)
    assert [(x.name, x.op, x.out_shape) for x in again.layers] == [(x.name, x.op, x.out_shape) for x in net.layers]
    assert again.layers[1] is not net.layers[1]  # one import per name, but each network its own layers
    assert get_network(net.name, 5).batch == 5
    assert default_batch("torchvision:resnet50") == 64 and default_batch("torchvision:mobilenet_v2") == 32
    assert get_network("torchvision:alexnet").batch == 256


def test_module_callable_loader(tmp_path, monkeypatch):
    (tmp_path / "tinynets.py").write_text(
        textwrap.dedent("""
        import torch.nn as nn

        def build():
            return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))

        def not_a_model():
            return 42

        def video():
            return nn.Sequential(nn.Conv3d(3, 8, 3), nn.ReLU())

        VALUE = 7
    """)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tinynets", raising=False)
    with pytest.raises(ModelImportError, match="names Python code to run"):  # not named by the user yet
        get_network("tinynets:build@1x8x8", 2)
    for source in (
        "tinynets:build",
        "tinynets:not_a_model",
        "tinynets:VALUE",
        "tinynets:missing",
        "tinynets:video",
        "nosuchmodule_xyz:build",
    ):
        trust(source)
    net = get_network("tinynets:build@1x8x8", 2)
    assert net.name == "tinynets:build@1x8x8" and net.batch == 2
    assert [x.name for x in net.layers] == ["data", "0", "1", "3", "prob"]
    assert net.param_count == 1 * 4 * 9 + 4 + 256 * 3 + 3
    for name, message in [
        ("tinynets:not_a_model", "tinynets:not_a_model returned a int, not a torch.nn.Module"),
        ("tinynets:VALUE", "tinynets:VALUE is a int, not a callable"),
        ("tinynets:missing", "module 'tinynets' has no attribute 'missing'"),
        ("nosuchmodule_xyz:build", "cannot import 'nosuchmodule_xyz'.*ModuleNotFoundError"),
        ("torchvision:nosuch", r"unknown torchvision model 'nosuch'; torchvision.models.list_models\(\) names its"),
        ("torchvision:resnet5", r"unknown torchvision model 'resnet5' \(did you mean resnet50, "),
        ("torchvision:alexnet@3x224", "input shape '3x224' is not CxHxW"),
        ("torchvision:alexnet@3x32x32", "cannot run torchvision:alexnet@3x32x32 on a 2x3x32x32"),
        ("tinynets:build@3x8x8", "cannot run tinynets:build@3x8x8 on a 2x3x8x8 input: at 0: .*channel"),
        ("tinynets:video@3x8x8", r"at 0: .*\(Conv3d: only models of 2-D convolutions on an N x C x H x W input"),
    ]:
        with pytest.raises(ModelImportError, match=message):
            get_network(name, 2)


def test_a_name_passed_to_plan_memory_or_max_batch_is_the_callers_and_is_imported(tmp_path, monkeypatch):
    """The Python API's own argument is the user naming their model, as --network is: no trust() needed."""
    from engine.memory import plan_memory
    from engine.memory.capacity import max_batch

    (tmp_path / "callernets.py").write_text(
        "import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "callernets", raising=False)
    with pytest.raises(ModelImportError, match="names Python code to run"):  # a name from elsewhere: data
        get_network("callernets:build@1x8x8", 2)
    assert plan_memory("callernets:build@1x8x8", "liveness", batch=2).peak > 0
    assert max_batch("callernets:build@1x8x8", "liveness", 1 << 30, limit=64) == 64


def test_a_plan_naming_python_code_is_refused_without_running_it(tmp_path):
    """A plan is data: its network name must not import and call a module (here os.abort)."""
    from engine.errors import EngineError
    from engine.plan import load_plan
    from engine.profile import Profile, resolve_profile
    from engine.planner import make_plan

    plan = make_plan(
        Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo")),
        get_network("alexnet", 256),
        mode="wr",
        budget="64MiB",
    )
    doc = plan.to_dict()
    doc["network"]["name"] = "os:abort"
    path = tmp_path / "hostile.plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EngineError, match="names Python code to run"):
        load_plan(path)


def test_build_options_refused():
    with pytest.raises(SpecError, match="takes no build options"):
        get_network("torchvision:resnet18", 2, image=112)


# ----------------------------------------------------------------------------------------- CLI


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,message",
    [
        (["networks", "--network", "torchvision:nosuch"], "error: unknown torchvision model 'nosuch'"),
        (
            ["networks", "--network", "torchvision:alexnet", "--input", "3x2x2"],
            "error: cannot run torchvision:alexnet@3x2x2",
        ),
        (["networks", "--network", "alexnet", "--input", "3x64x64"], "error: --input is for PyTorch networks"),
        (["memory", "--network", "torchvision:alexnet", "--input", "big"], "error: input shape 'big' is not CxHxW"),
        (["networks", "--input", "3x64x64"], "error: --input needs --network"),
        (
            ["networks", "--network", "torchvision:alexnet@3x64x64", "--input", "3x32x32"],
            "error: 'torchvision:alexnet@3x64x64' gives input 3x64x64 and --input 3x32x32: give the shape once",
        ),
    ],
)
def test_cli_errors_one_line(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_cli_networks_with_input(capsys):
    from engine.cli import main

    assert main(["networks", "--network", "torchvision:resnet18", "--input", "3x64x64", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torchvision:resnet18@3x64x64: torchvision:resnet18 imported from PyTorch, input 3x64x64")
    assert "batch 2, 11,689,512 parameters, 20 conv layers, 59 kernels" in out


def test_zoo_and_cli_do_not_import_torch():
    code = (
        "import sys; from engine.zoo import get_network; from engine.cli import main; "
        "get_network('alexnet'); main(['networks', '--json']); assert 'torch' not in sys.modules"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_dashboard_offers_profiled_torch_network():
    """A profile that records a PyTorch network name offers it like a zoo network (kernels are keyed by
    signature, so the AlexNet profile covers torchvision's AlexNet)."""
    from dashboard.scopes import profile_scopes
    from engine.profile import Profile, resolve_profile

    bundled = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
    networks = [{**entry, "name": "torchvision:alexnet"} for entry in bundled.networks]
    scopes = profile_scopes(Profile(bundled.table, bundled.provenance, networks))
    assert {s.network for s in scopes} == {"torchvision:alexnet"}
    assert [s.batch for s in scopes] == [s.batch for s in profile_scopes(bundled)]
