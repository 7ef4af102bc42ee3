"""``python -m engine torch-plan`` on a machine without a GPU: every mistake is one line and exit 2,
found before any GPU work; the GPU path itself (profile, plan, write) needs a GPU host."""

import pytest

from engine.cli import main
from engine.gpu import available


def one_line_error(capsys, argv) -> str:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own mistakes leave through parser.exit(2, ...)
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--mode", "wr"], "--mode wr needs --budget"),
        (["--mode", "wd"], "--mode wd needs --budget"),
        (["--mode", "free", "--budget", "64MiB"], "--mode free takes no --budget"),
        (["--budget", "64XB"], "unknown unit 'XB'"),
        (["--mode", "fast", "--budget", "64MiB"], "argument --mode: invalid choice"),
    ],
)
def test_mistakes_are_one_line_before_any_gpu_work(capsys, argv, expected):
    assert expected in one_line_error(capsys, ["torch-plan", "--network", "alexnet", *argv])


@pytest.mark.parametrize("command", ["torch-plan", "profile"])
@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--policy", "bogus"], "unknown batch-size policy 'bogus'"),
        (["--max-workspace", "abc"], "invalid size 'abc'"),
        (["--cache", "/dev/null"], "--cache '/dev/null' is not a file"),
        (["-o", "{tmp}"], "is a folder"),
        (["-o", "{tmp}/no/such/folder/out.json"], "No such file or directory"),
    ],
)
def test_what_profiling_is_asked_is_checked_before_the_gpu_and_the_measuring(capsys, tmp_path, command, argv, expected):
    """A wrong destination was found only once the whole profile was measured (the measurements kept in the
    cache, the file not written); now every such mistake comes before the GPU is asked for."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    budget = ["--budget", "64MiB"] if command == "torch-plan" else []
    assert expected in one_line_error(capsys, [command, "--network", "alexnet", *budget, *argv])


def test_torch_plan_checks_its_profile_output_too(capsys, tmp_path):
    argv = ["torch-plan", "--network", "alexnet", "--budget", "64MiB", "--profile-output", str(tmp_path)]
    assert f"cannot write the profile to '{tmp_path}': is a folder" in one_line_error(capsys, argv)


def test_unknown_network_is_named_before_the_gpu_is_asked_for(capsys):
    assert "nosuchnet" in one_line_error(capsys, ["torch-plan", "--network", "nosuchnet", "--budget", "64MiB"])


@pytest.mark.skipif(available()[0], reason="a GPU is present: the command would profile")
def test_without_a_gpu_it_says_why(capsys):
    msg = one_line_error(capsys, ["torch-plan", "--network", "alexnet", "--batch", "8", "--budget", "64MiB"])
    assert "cannot profile" in msg
