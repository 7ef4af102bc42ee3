"""``python -m engine networks``: the zoo, and one network's convolution kernels.

Without ``--network``: per zoo network its parameters, conv layers, kernels and unique kernel
signatures (the number of profile entries it needs, since identical kernels share one;
mu-cuDNN §III). With ``--network``: every kernel (id, signature key) and the unique kernels.
"""

from __future__ import annotations

import json

from ..network import Network
from ..netnames import SYNTAX
from .network_args import add_input_argument
from ..zoo import GENERATORS, NETWORKS, get_network


def add_arguments(parser) -> None:
    parser.add_argument(
        "--network",
        metavar="NAME",
        help="a zoo name, a generator such as resnet-152 or vgg-116, a .json/.yaml spec, "
        "or a PyTorch model such as torchvision:resnet50",
    )
    parser.add_argument("--batch", type=int, metavar="N", help="mini-batch size (default: per network)")
    add_input_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def summary(net: Network) -> dict:
    return {
        "network": net.name,
        "batch": net.batch,
        "params": net.param_count,
        "conv_layers": len(net.conv_layers()),
        "kernels": len(net.kernels()),
        "unique_kernels": len(net.unique_kernels()),
        "description": net.description,
    }


def details(net: Network) -> dict:
    unique = net.unique_kernels()
    return {
        **summary(net),
        "kernel_list": [
            {"id": k.id, "layer": k.layer, "kind": k.kind.value, "key": k.signature.key} for k in net.kernels()
        ],
        "unique_kernel_list": [
            {"key": key, "count": len(ks), "kernels": [k.id for k in ks]} for key, ks in unique.items()
        ],
    }


def run(args) -> int:
    if args.network:
        info = details(get_network(args.network, args.batch))
        if args.json:
            print(json.dumps(info, indent=1))
        else:
            _print_details(info)
        return 0
    rows = [summary(get_network(name, args.batch)) for name in NETWORKS]
    if args.json:
        print(
            json.dumps(
                {
                    "networks": rows,
                    "generators": {pattern: help_text for pattern, (_, _, help_text) in GENERATORS.items()},
                },
                indent=1,
            )
        )
        return 0
    header = ("network", "batch", "params", "conv layers", "kernels", "unique", "description")
    table = [header] + [
        (
            r["network"],
            str(r["batch"]),
            f"{r['params']:,}",
            str(r["conv_layers"]),
            str(r["kernels"]),
            str(r["unique_kernels"]),
            r["description"],
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print(
            "  ".join(
                cell.rjust(w) if 0 < i < len(widths) else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
            )
            + "  "
            + row[-1]
        )
    print("\ngenerators:")
    for pattern, (_, batch, help_text) in GENERATORS.items():
        print(f"  {pattern:9s} {help_text}; default batch {batch}")
    print("  or a .json/.yaml spec file (docs/network-spec.md)")
    print(f"  or a PyTorch model: {SYNTAX} (--input CxHxW)")
    return 0


def _print_details(info: dict) -> None:
    print(f"{info['network']}: {info['description']}")
    print(
        f"batch {info['batch']}, {info['params']:,} parameters, {info['conv_layers']} conv layers, "
        f"{info['kernels']} kernels, {info['unique_kernels']} unique"
    )
    print(f"\nkernels ({info['kernels']}):")
    width = max((len(k["id"]) for k in info["kernel_list"]), default=2)
    for k in info["kernel_list"]:
        print(f"  {k['id']:{width}s}  {k['key']}")
    print(f"\nunique kernels ({info['unique_kernels']}):")
    for u in info["unique_kernel_list"]:
        ids = ", ".join(u["kernels"])
        print(f"  {u['count']:4d} x {u['key']}  [{ids}]")
