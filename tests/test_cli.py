"""The one command line, `albert-edu` (and `python -m albert_edu`): every command is listed and has --help;
a malformed command line exits with 2 and a usage message, a command that cannot do its work with 1 and one
line `error: ...`, and success with 0."""

import subprocess
import sys
from pathlib import Path

import pytest

from albert_edu.tools.cli import COMMANDS, main


def albert_edu(*args: str) -> subprocess.CompletedProcess:
    """The installed console script, as a reader runs it."""
    return subprocess.run([str(Path(sys.executable).parent / "albert-edu"), *args], capture_output=True, text=True)


def test_the_console_script_lists_every_command():
    result = albert_edu("--help")
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("    ") and line.split()]
    assert set(COMMANDS) <= set(listed)


def test_python_dash_m_is_the_same_command_line():
    result = subprocess.run([sys.executable, "-m", "albert_edu", "book", "check"], capture_output=True, text=True)
    assert result.returncode == 0 and "in step" in result.stdout


def test_python_dash_m_albert_edu_book_is_the_book_command_design_names():
    result = subprocess.run([sys.executable, "-m", "albert_edu.book", "check"], capture_output=True, text=True)
    assert result.returncode == 0 and "in step" in result.stdout
    wrong = subprocess.run([sys.executable, "-m", "albert_edu.book", "nosuch"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "invalid choice: 'nosuch'" in wrong.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0 and f"albert-edu {command}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["nosuch"], "invalid choice: 'nosuch'"),
    ([], "the following arguments are required: COMMAND"),
    (["pretrain", "--preset", "tiny", "--out", "x", "--nosuch-flag"], "unrecognized arguments: --nosuch-flag"),
    (["pretrain", "--preset", "huge", "--out", "x"], "argument --preset: invalid choice: 'huge'"),
    (["experiment", "--recipe", "huge"], "argument --recipe: invalid choice: 'huge'"),
    (["book", "nosuch"], "invalid choice: 'nosuch'"),
    (["make-examples", "--objective", "order", "--out", "x.jsonl"], "argument --objective: invalid choice: 'order'"),
])
def test_a_malformed_command_line_exits_with_2_and_says_why(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_an_unknown_chapter_is_an_error_naming_the_chapters(capsys):
    assert main(["book", "run", "42"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no chapter '42' in book.toml; expected one of: 00_preface.ipynb")


def test_pretrain_defaults_come_from_training_config():
    from albert_edu.tools.cli import command_parser
    from albert_edu.training import TrainingConfig

    args = command_parser("pretrain").parse_args(["--preset", "tiny", "--out", "x"])
    defaults = TrainingConfig()
    assert TrainingConfig(**{k: getattr(args, k) for k in vars(defaults)}) == defaults
