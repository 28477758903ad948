"""Every command the documentation gives is accepted, and every script installs what it runs.

A new user's fresh clone runs what README.md, CONTRIBUTING.md and ``docs/``
say. Two cheap checks stand in for running each command (which takes a
cluster, the real node, minutes):

- each ``build/*.sh``, ``python -m tests...`` and ``ring-devcluster``
  command's mode prints its help (exit 0), and that help names every option
  the docs give it (:func:`tests.support.doccommands.help_argv`);
- each ``build/*.sh`` script's ``pip install`` lines provide every module the
  Python it runs imports (:func:`tests.support.doccommands.missing_imports`):
  ``build/bench.sh`` once installed only ``.[test]`` and its every mode
  failed with ``No module named 'ringdevcluster'``.

The help runs use this checkout's ``.venv`` (the scripts create it when
missing, as on a fresh clone).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import doccommands
from tests.support.doccommands import ROOT, Command

pytestmark = pytest.mark.tools

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _groups() -> dict[str, list[Command]]:
    """Documented commands by the help that covers them (``build/bench.sh --vs-dns``, ``ring-devcluster up``...)."""
    groups: dict[str, list[Command]] = {}
    for command in doccommands.documented_commands():
        key = " ".join((command.head, *doccommands.mode_of(command)))
        groups.setdefault(key, []).append(command)
    return groups


GROUPS = _groups()


def _help(argv: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300, check=False)


def _unaccepted(
    commands: list[Command],
    *,
    python: Path = VENV_PYTHON,
    root: Path = ROOT,
    done: subprocess.CompletedProcess[str] | None = None,
) -> list[str]:
    """What is wrong with ``commands`` (one mode of one program), one line each: empty when all are accepted.

    ``done`` is the help run when it was made already (:func:`helps`), else it is made here.
    """
    argv = doccommands.help_argv(commands[0], python=str(python), root=root)
    done = done or _help(argv, root)
    shown = " ".join(str(Path(a).relative_to(root)) if a.startswith(f"{root}/") else a for a in argv)
    shown = shown.removeprefix("bash ")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return [f"{shown} exited {done.returncode}: {' / '.join(tail)}"]
    problems = []
    for command in commands:
        mode = {word.split("=", 1)[0] for word in doccommands.mode_of(command, root)}
        for option in (o for o in command.options if o not in mode):
            if not any(word.strip("[],|") in (option, f"{option}=") for word in done.stdout.replace("=", "= ").split()):
                problems.append(f"{command.where}: `{command}`: {option} is not in `{shown}`")
    return problems


def test_the_docs_give_every_script_and_mode() -> None:
    """The extraction finds what the docs are known to give (a broken reader would make the checks below vacuous)."""
    for expected in (
        "build/demo.sh",
        "build/test.sh",
        "build/image.sh",
        "build/chaos.sh",
        "build/bench.sh",
        "build/bench.sh --vs-dns",
        "build/bench.sh --launcher",
        "build/bench.sh --delivery",
        "build/bench.sh --superpod",
        "ring-devcluster up",
    ):
        assert expected in GROUPS, sorted(GROUPS)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every group's help run, four at a time (each imports its program: seconds on a busy machine)."""
    assert VENV_PYTHON.exists(), f"no {VENV_PYTHON}: build/test.sh (or any build/*.sh) creates it"
    argvs = {key: doccommands.help_argv(cs[0], python=str(VENV_PYTHON)) for key, cs in GROUPS.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = {key: pool.submit(_help, argv, ROOT) for key, argv in argvs.items()}
        return {key: run.result() for key, run in runs.items()}


@pytest.mark.parametrize("key", sorted(GROUPS))
def test_each_documented_command_is_accepted(key: str, helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert _unaccepted(GROUPS[key], done=helps[key]) == []


def test_a_documented_option_the_program_lacks_is_reported() -> None:
    planted = doccommands.commands_in(
        "```sh\nbuild/bench.sh --vs-dns --workers 2 --no-such-flag 3 \\\n    --json out.json\n```\n", where="planted.md"
    )
    assert [str(c) for c in planted] == ["build/bench.sh --vs-dns --workers 2 --no-such-flag 3 --json out.json"]
    assert _unaccepted(planted) == [
        "planted.md:2: `build/bench.sh --vs-dns --workers 2 --no-such-flag 3 --json out.json`: "
        "--no-such-flag is not in `build/bench.sh --vs-dns --help`"
    ]


def test_commands_are_read_from_fences_and_from_spans_over_a_line_break() -> None:
    text = (
        "Run (`build/bench.sh\n--delivery --repeats 3`) or `build/chaos.sh --quick` # not a comment here\n\n"
        "```sh\nbuild/test.sh   # build/image.sh in a comment is not a command\n"
        "python -m tests.bench.topology --spread rack && ring-devcluster status\n```\n"
        "`python -m tests...` names no module.\n"
    )
    assert [(str(c), c.where) for c in doccommands.commands_in(text, where="p.md")] == [
        ("build/bench.sh --delivery --repeats 3", "p.md:1"),
        ("build/chaos.sh --quick", "p.md:2"),
        ("build/test.sh", "p.md:5"),
        ("python -m tests.bench.topology --spread rack", "p.md:6"),
        ("ring-devcluster status", "p.md:6"),
    ]


def test_a_documented_script_that_does_not_exist_is_reported() -> None:
    planted = doccommands.commands_in("Run `build/nosuch.sh --fast` first.\n", where="planted.md")
    problems = _unaccepted(planted)
    assert len(problems) == 1 and problems[0].startswith("build/nosuch.sh --help exited 127"), problems


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "build").glob("*.sh")))
def test_each_script_installs_what_it_runs(script: str) -> None:
    assert doccommands.missing_imports(ROOT / "build" / script) == {}


def test_a_script_that_installs_too_little_is_reported(tmp_path: Path) -> None:
    """bench.sh as it was: the project's test extra only, then the benches, which import ringdevcluster."""
    script = tmp_path / "bench.sh"
    script.write_text(
        "#!/usr/bin/env bash\n"
        ".venv/bin/python -m pip install --quiet -e '.[test]'\n"
        'exec .venv/bin/python -m tests.bench.vsdns "$@"\n'
    )
    assert doccommands.missing_imports(script) == {"ringdevcluster": "tests/bench/vsdns.py"}
    script.write_text(script.read_text().replace("'.[test]'", "'.[test]' -e build/devcluster"))
    assert doccommands.missing_imports(script) == {}


def test_a_dispatch_flag_with_a_value_goes_to_the_help(tmp_path: Path) -> None:
    """``build/bench.sh --kinds job,sts`` runs another program than ``build/bench.sh``: its help is that one's."""
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "x.sh").write_text(
        'for arg in "$@"; do\n'
        '    if [[ "$arg" == "--plot" ]]; then\n        pip install matplotlib\n    fi\n'
        '    if [[ "$arg" == --kinds* ]]; then\n        exec python -m kinds "$@"\n    fi\n'
        "done\n"
    )
    (command,) = doccommands.commands_in("`build/x.sh --kinds job,sts --jobs 5 --plot a.png`", where="p.md")
    assert doccommands.dispatch_flags(tmp_path / "build" / "x.sh") == ("--kinds",)
    assert doccommands.mode_of(command, tmp_path) == ("--kinds", "job,sts")
    assert doccommands.help_argv(command, root=tmp_path)[2:] == ["--kinds", "job,sts", "--help"]
