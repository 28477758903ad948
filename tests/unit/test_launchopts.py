"""The launcher's command line read without argparse (for the early registration), against argparse's reading."""

from __future__ import annotations

import math

import pytest

from ranktable.launch import launchopts
from ranktable.launch.launcher import _parser, launch_options

API = ["--from-api", "--register", "--namespace", "ns", "--configmap", "cm"]


def test_the_scanner_knows_exactly_the_parsers_options() -> None:
    actions = {name: action for name, action in _parser()._option_string_actions.items() if name.startswith("--")}
    actions.pop("--help")
    assert {name for name, action in actions.items() if action.nargs == 0} == launchopts.FLAGS
    assert {name for name, action in actions.items() if action.nargs != 0} == launchopts.VALUED
    assert tuple(actions["--print"].choices or ()) == launchopts.PRINT_CHOICES


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([*API, "--", "python3", "train.py", "--lr", "1"], id="api-register"),
        pytest.param([*API, "--timeout=30", "--pod=p-0", "--print", "json"], id="equals-and-print"),
        pytest.param(["--kubeconfig", "/k", "--from-api", "--namespace=", "--", "x"], id="empty-value"),
        pytest.param(["--supervise", "--grace-period", "0", "--max-restarts", "3", "--", "x"], id="supervise"),
        pytest.param(["--timeout", "inf", "--poll-interval", "1e-3", "--", "x"], id="floats-as-argparse"),
    ],
)
def test_what_the_scanner_reads_argparse_reads_the_same(argv: list[str]) -> None:
    read = launchopts.scan(argv)
    assert read is not None
    scanned = read[0]
    parsed = launch_options(argv)
    for name, value in scanned.items():
        got = getattr(parsed, {"--print": "print_as"}.get(name, name[2:].replace("-", "_")))
        if name in launchopts.FLAGS:
            assert got is True and value is True
        elif isinstance(got, float):
            assert got == float(str(value)) or (math.isnan(got) and math.isnan(float(str(value))))
        else:
            assert str(got) == value
    given = {name[2:].replace("-", "_") for name in scanned} | ({"print_as"} if "--print" in scanned else set())
    defaults = _parser().parse_args([])
    for key, value in vars(parsed).items():
        if key not in given:
            assert value == getattr(defaults, key), key
    fast = launchopts.parsed_without_argparse(argv)  # what main uses instead of argparse for such a line
    assert fast is not None and vars(fast) == vars(parsed)
    assert {k: type(v) for k, v in vars(fast).items()} == {k: type(v) for k, v in vars(parsed).items()}


def test_the_defaults_without_argparse_are_the_parsers() -> None:
    assert launchopts.PARSED_DEFAULTS == vars(_parser().parse_args([]))


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--from", "--register", "--", "x"], id="abbreviation"),
        pytest.param(["--from-api", "-h"], id="help"),
        pytest.param(["--from-api", "--bogus", "--", "x"], id="unknown"),
        pytest.param(["--from-api", "word", "--", "x"], id="positional"),
        pytest.param(["--pod", "a", "--pod", "b", "--", "x"], id="twice"),
        pytest.param(["--pod", "--from-api", "--", "x"], id="value-looks-like-an-option"),
        pytest.param(["--timeout", "-1", "--", "x"], id="negative-value"),
        pytest.param(["--from-api=yes", "--", "x"], id="flag-with-value"),
        pytest.param(["--namespace"], id="value-missing"),
    ],
)
def test_anything_argparse_might_read_otherwise_is_left_to_it(argv: list[str]) -> None:
    assert launchopts.scan(argv) is None
    assert launchopts.parsed_without_argparse(argv) is None


@pytest.mark.parametrize(
    ("argv", "env"),
    [
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
def test_a_usage_error_of_main_sends_nothing_early(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launchopts.scan(argv) is not None
    assert launchopts.parsed_without_argparse(argv) is None
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
