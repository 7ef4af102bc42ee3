"""The network option every command with ``--network`` shares: ``--input CxHxW`` for PyTorch models.

The input shape is folded into the network name (``torchvision:inception_v3@3x299x299``, see
engine.netnames), so each command keeps passing one name to ``get_network`` and the name it
records rebuilds the same network.
"""

from __future__ import annotations

from ..errors import EngineError
from ..netnames import SYNTAX, is_torch_name, parse_input, split_name, with_input
from ..pytorch.loader import trust


def add_input_argument(parser) -> None:
    parser.add_argument(
        "--input", metavar="CxHxW", default=None, help=f"per-sample input shape of a PyTorch network ({SYNTAX})"
    )


def apply_input(args) -> None:
    """Fold ``--input`` into ``args.network``; commands without ``--input`` are left alone. A
    ``module:callable`` the user typed is trusted to run (engine.pytorch.loader.trust)."""
    if getattr(args, "network", None):
        trust(args.network)
    shape = getattr(args, "input", None)
    if shape is None:
        return
    if not getattr(args, "network", None):
        raise EngineError("--input needs --network, e.g. --network torchvision:inception_v3 --input 3x299x299")
    if not is_torch_name(args.network):
        raise EngineError(f"--input is for PyTorch networks ({SYNTAX}); {args.network!r} sets its own input")
    named = split_name(args.network)[1]
    if "@" in args.network and named != parse_input(shape):
        raise EngineError(
            f"{args.network!r} gives input {'x'.join(map(str, named))} and --input {shape}: give the shape once"
        )
    args.network = with_input(args.network, shape)
