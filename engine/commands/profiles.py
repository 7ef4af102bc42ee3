"""``python -m engine profiles``: the bundled profiles (or given files) with provenance and networks."""

from __future__ import annotations

import argparse

from ..profile import Profile, bundled_profiles


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="describe these profile files instead")


def run(args) -> int:
    found = {p: p for p in args.paths} if args.paths else bundled_profiles()
    if not found:
        print(
            "no profiles are bundled yet (assets/profiles is empty); record one on a GPU host with "
            "`python -m engine profile`, or pass a profile file to --profile"
        )
        return 0
    for name, path in found.items():
        profile = Profile.load(path)
        p = profile.provenance
        print(f"{name}{'  [SYNTHETIC]' if profile.synthetic else ''}")
        print(f"  file: {path}")
        print(
            f"  gpu: {p.get('gpu', '?')}; driver {p.get('driver', '?')}; cuDNN {p.get('cudnn_version', '?')}; "
            f"frontend {p.get('frontend_version', '?')}; recorded {p.get('date', '?')}"
        )
        if p.get("command"):
            print(f"  command: {p['command']}")
        ok = (profile.table.status == "ok").sum()
        print(
            f"  {len(profile.signatures())} kernel signatures, {len(profile.table)} plans measured "
            f"({ok} ok, {len(profile.table) - ok} failed or skipped)"
        )
        for n in profile.networks or [{}]:
            if n:
                print(
                    f"  network: {n.get('name')} b{n.get('batch')} {n.get('precision', '?')} "
                    f"{n.get('layout', '?')}, policy {n.get('policy', '?')}"
                )
            else:
                print("  networks: none recorded")
    return 0
