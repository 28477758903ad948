"""The launcher's command line: one argparse parser, read the same way by main and by the early registration."""

from __future__ import annotations

import pytest

from ranktable.launch import launchopts
from ranktable.launch.launcher import _parser, launch_options

API = ["--from-api", "--register", "--namespace", "ns", "--configmap", "cm"]


def test_mains_parser_is_the_options_parser_with_the_help_epilog() -> None:
    mine, plain = _parser(), launchopts.parser()
    assert [a.option_strings for a in mine._actions] == [a.option_strings for a in plain._actions]
    assert "exit codes:" in (mine.epilog or "") and not plain.epilog
    assert tuple(plain._option_string_actions["--print"].choices or ()) == launchopts.PRINT_CHOICES


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([*API, "--", "python3", "train.py", "--lr", "1"], id="api-register"),
        pytest.param([*API, "--timeout=30", "--pod=p-0", "--print", "json"], id="equals-and-print"),
        pytest.param(["--kubeconfig", "/k", "--from-api", "--namespace=", "--", "x"], id="empty-value"),
        pytest.param(["--supervise", "--grace-period", "0", "--max-restarts", "3", "--", "x"], id="supervise"),
        pytest.param(["--from", "--reg", "--", "x"], id="abbreviation"),
    ],
)
def test_the_early_registration_reads_what_main_reads(argv: list[str]) -> None:
    parsed = launchopts.parsed_quietly(argv)
    assert parsed is not None and vars(parsed) == vars(launch_options(argv))


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        pytest.param(["--from-api", "-h"], {}, id="help"),
        pytest.param(["--from-api", "--bogus", "--", "x"], {}, id="unknown"),
        pytest.param([*API, "--"], {}, id="no-command"),
        pytest.param([*API, "--print", "json", "--", "x"], {}, id="print-and-command"),
        pytest.param([*API, "--print", "yaml"], {}, id="bad-print-choice"),
        pytest.param([*API, "--timeout", "0", "--", "x"], {}, id="zero-timeout"),
        pytest.param([*API, "--timeout", "nan", "--", "x"], {}, id="nan-timeout"),
        pytest.param([*API, "--timeout", "ten", "--", "x"], {}, id="not-a-number"),
        pytest.param([*API, "--max-restarts", "1.5", "--", "x"], {}, id="not-an-int"),
        pytest.param([*API, "--", "x"], {"RING_TIMEOUT": "ten"}, id="bad-env-timeout"),
    ],
)
def test_a_line_main_stops_on_sends_nothing_early_and_prints_nothing(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launchopts.parsed_quietly(argv) is None
    assert capsys.readouterr() == ("", "")
    with pytest.raises((SystemExit, ValueError, launchopts.UsageError)):
        args = launch_options(argv)  # argparse refuses it, or main's own rules do
        launchopts.check_parsed(args, argv[argv.index("--") + 1 :] if "--" in argv else [])


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [(True, None, True), (False, "1", True), (False, "true", True), (False, "yes", False), (False, None, False)],
    ids=["flag", "env-1", "env-true", "env-other", "neither"],
)
def test_register_requested(flag: bool, env: str | None, expected: bool) -> None:
    assert launchopts.register_requested(flag, {} if env is None else {"RING_REGISTER": env}) is expected


def test_check_options_returns_the_timeout_given_else_the_environments_else_600(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RING_TIMEOUT", raising=False)
    assert launchopts.check_options(command=[], print_as="env", supervise=False, timeout=None) == 600.0
    assert launchopts.check_options(command=["x"], print_as=None, supervise=False, timeout=7.5) == 7.5
    monkeypatch.setenv("RING_TIMEOUT", "30")
    assert launchopts.check_options(command=["x"], print_as=None, supervise=False, timeout=None) == 30.0
