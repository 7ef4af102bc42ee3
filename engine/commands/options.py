"""Options and loaders the subcommands share: which profile, network and policy."""

from __future__ import annotations

import argparse

from ..errors import EngineError
from ..kernel_sets import default_batch
from ..network import Network
from ..precision import LAYOUTS, PRECISIONS
from ..profile import ENGINE_SETS, Profile, resolve_profile
from ..zoo import get_network
from .network_args import add_input_argument


def positive_int(text: str) -> int:
    """An argparse type: a count such as --repeats (argparse names the option in its one-line error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_source_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """Arguments shared by ``plan`` and ``front``: which profile, network and policy."""
    parser.add_argument(
        "--profile",
        required=required,
        metavar="PATH|NAME",
        help="a profile file (.profile.json[.gz]) or the name of a bundled profile",
    )
    parser.add_argument(
        "--network", metavar="NAME", help="a zoo network, e.g. alexnet (default: the profile's, when it records one)"
    )
    add_input_argument(parser)
    parser.add_argument(
        "--batch",
        type=str,
        default=None,
        metavar="N",
        help="mini-batch size (default: the one the profile records for this network)",
    )
    parser.add_argument(
        "--policy",
        default="powerOfTwo",
        metavar="undivided|powerOfTwo|all|LIST",
        help="batch-size policy: which micro-batch sizes the optimizer may use (default powerOfTwo)",
    )
    parser.add_argument(
        "--precision", default=None, metavar="|".join(PRECISIONS), help="default: as the profile records the network"
    )
    parser.add_argument(
        "--layout", default=None, metavar="|".join(LAYOUTS), help="default: as the profile records the network"
    )
    parser.add_argument(
        "--engines",
        default="all",
        choices=ENGINE_SETS,
        help="plans the optimizer may use: all measured (default), heuristics (only cuDNN's "
        "heuristic list, as a framework sees it), deterministic (no NONDETERMINISTIC plans)",
    )


def load_sources(args) -> tuple[Profile, Network]:
    profile = Profile.load(resolve_profile(args.profile)).restrict(args.engines)
    if args.network is None:  # a name read from the file: get_network imports no code it names untrusted
        names = list(dict.fromkeys(str(n.get("name")) for n in profile.networks))
        if len(names) != 1:
            raise EngineError(
                f"--network is needed: the profile records {len(names)} networks"
                + (f" ({', '.join(names[:5])})" if names else "")
            )
        args.network = names[0]
    batch = None
    if args.batch is not None:
        try:
            batch = int(args.batch)
        except ValueError:
            raise EngineError(f"--batch must be a positive integer, got {args.batch!r}") from None
        if batch < 1:
            raise EngineError(f"--batch must be a positive integer, got {batch}")
    else:
        batch = default_batch(profile, args.network)
    return profile, get_network(args.network, batch)
