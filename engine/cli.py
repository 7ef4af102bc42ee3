"""``python -m engine``: one entry point, one module per subcommand, all in engine/commands/.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Every
``EngineError`` (and any ``ValueError``/``KeyError`` from bad input) becomes one line on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from . import fileio
from .commands.network_args import apply_input
from .errors import EngineError

DESCRIPTION = """\
Plan micro-batched cuDNN convolutions under a workspace budget (mu-cuDNN, arXiv:1804.04806) and the
memory of a training step under vDNN, Layrub and SuperNeurons policies. Everything but `profile`,
`verify` and `torch-plan` runs without a GPU, on the bundled H100/H200 profiles."""

EPILOG = """\
examples:
  python -m engine networks
  python -m engine profiles
  python -m engine plan --profile h100-alexnet-b256-tf32-nchw-powerOfTwo --network alexnet \\
      --mode wd --budget 120MiB -o plan.json
  python -m engine memory --network alexnet --batch 256 --policy all --capacity 12GiB

Run `python -m engine COMMAND --help` for a command's options. Bad input ends with one
`error:` line and exit status 2."""

# name -> (module, one-line help); modules are imported only when their command runs
COMMANDS = {
    "networks": ("engine.commands.networks", "list the network zoo and each network's unique kernels"),
    "profiles": ("engine.commands.profiles", "list bundled profiles and their provenance"),
    "plan": ("engine.commands.plan", "make a WR or WD plan from a profile and export it as JSON"),
    "front": ("engine.commands.front", "the network Pareto front (total time vs total workspace) as CSV/JSON"),
    "profile": ("engine.commands.profile", "profile a network's kernels on this GPU (needs CuPy + cuDNN frontend)"),
    "verify": ("engine.commands.verify", "run a plan on this GPU, check results against an undivided reference"),
    "torch-plan": (
        "engine.commands.torch_plan",
        "profile what is missing on this GPU, plan, and write a plan "
        "for a PyTorch model (apply it with engine.pytorch.apply_plan)",
    ),
    "memory": ("engine.commands.memory", "memory timeline of a training step under vDNN/Layrub/SuperNeurons policies"),
}


STDOUT_ARGS = ("output", "profile_output")  # file options that take "-" (memory's --json reads it itself)
OUTPUT_ARGS = ("output", "profile_output", "json", "snapshot")  # files a command writes
INPUT_ARGS = ("profile", "plan", "show", "time_params", "network", "cache")  # files it reads (a network: a spec)


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage mistakes print one ``error:`` line (exit 2) like every other bad input, not argparse's usage block."""

    def error(message: str):
        parser.exit(2, f"error: {parser.prog}: {message} (see --help)\n")

    parser.error = error


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbose = "show the ILP solver's (HiGHS or CBC) banner and log"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose)
    one_line_errors(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parsers = {}
    for name, (_module, help_text) in COMMANDS.items():
        parsers[name] = sub.add_parser(name, help=help_text, description=help_text)
        # also after the command; SUPPRESS keeps a --verbose given before it
        parsers[name].add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose)
        one_line_errors(parsers[name])
    return parser, parsers


def _flag(dest: str) -> str:
    return f"--{dest.replace('_', '-')}"


def _distinct_files(args) -> None:
    """No output may replace a file the command reads (``plan --profile p.gz -o p.gz`` would overwrite the
    measurements with a plan) or another output: refused before anything is computed or written."""
    outs = [(_flag(k), v) for k in OUTPUT_ARGS if isinstance(v := getattr(args, k, None), str) and v != fileio.STDOUT]
    ins = [(_flag(k), v) for k in INPUT_ARGS if isinstance(v := getattr(args, k, None), str) and os.path.isfile(v)]
    for flag, out in outs:
        for read_flag, read in ins:
            if fileio.same_file(out, read):
                raise EngineError(
                    f"{flag} {out!r} is the file {read_flag} reads: writing there would replace it; write elsewhere"
                )
    for i, (flag, out) in enumerate(outs):
        for other_flag, other in outs[i + 1 :]:
            regular = os.path.isfile(out) and os.path.isfile(other) and fileio.same_file(out, other)
            if regular or (out and os.path.abspath(out) == os.path.abspath(other)):
                raise EngineError(f"{flag} and {other_flag} both name {out!r}: give each output its own file")


def _outputs(args):
    """``-o -`` (or ``--profile-output -``, or a name for what stdout already is, such as ``/dev/stdout``): that
    file to stdout, the command's messages to stderr."""
    _distinct_files(args)
    to_stdout = [_flag(k) for k in STDOUT_ARGS if (v := getattr(args, k, None)) is not None and fileio.is_stdout(v)]
    if len(to_stdout) > 1:
        raise EngineError(f"{' and '.join(to_stdout)} both go to standard output: only one file can")
    return fileio.data_to_stdout() if to_stdout else contextlib.nullcontext()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, parsers = build_parser()
    # import only the chosen command's module, so `networks` never imports the GPU stack
    name = next((a for a in argv if not a.startswith("-")), None)
    if name in COMMANDS:
        module = importlib.import_module(COMMANDS[name][0])
        module.add_arguments(parsers[name])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.verbose or "engine.optimize.wd" in sys.modules:  # PuLP loads only for commands that solve
        importlib.import_module("engine.optimize.wd").SOLVER_LOG["on"] = args.verbose
    try:
        apply_input(args)
        with _outputs(args):
            return int(module.run(args) or 0)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
    except (ValueError, KeyError) as err:
        print(f"error: {err.args[0] if err.args else err}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except MemoryError:
        print("error: out of memory: this command needs more memory than this machine gave it", file=sys.stderr)
    except OSError as err:  # a file the command was pointed at: unreadable, a folder, on a full disk
        print(f"error: {err.strerror or err}" + (f": {err.filename!r}" if err.filename else ""), file=sys.stderr)
    return 2
