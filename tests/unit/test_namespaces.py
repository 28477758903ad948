"""Watched namespaces: how ``--namespace`` reads, and how one cache spans several namespaces.

The controller with a list of namespaces against the real control plane is in
tests/integration/test_controller_namespaces.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from ringcontroller.kube import PODS
from ringcontroller.options import namespace_list, parse
from ringcontroller.reflector import Reflector
from ringcontroller.scoped import Scoped


def test_no_namespace_flag_watches_all_namespaces() -> None:
    assert parse([]).namespaces == ()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--namespace", "a"], ("a",)),
        (["--namespace", "a,b"], ("a", "b")),
        (["--namespace", "a", "--namespace", "b"], ("a", "b")),
        (["--namespace", " b , a ", "--namespace", "c,a"], ("b", "a", "c")),  # order kept, each once
        (["--namespace=team-1"], ("team-1",)),
    ],
)
def test_namespace_flag_is_repeatable_and_comma_separated(argv: list[str], expected: tuple[str, ...]) -> None:
    assert parse(argv).namespaces == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "empty namespace name"),
        ("a,,b", "empty namespace name"),
        ("a,", "empty namespace name"),
        ("Team", "'Team' is not a namespace name"),
        ("a/b", "'a/b' is not a namespace name"),
        ("-a", "'-a' is not a namespace name"),
        ("x" * 64, "is not a namespace name"),
    ],
)
def test_bad_namespace_is_a_usage_error_naming_it(value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error; its message is on stderr
        parse([f"--namespace={value}"])
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    with pytest.raises(ValueError, match="namespace"):
        namespace_list([value])


def test_help_says_the_default_is_all_namespaces(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="^0$"):  # --help prints and exits 0
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--namespace NS[,NS...]" in text
    assert "default: all namespaces" in text and "(default: [])" not in text


@dataclass(frozen=True)
class Rec:
    name: str
    job: str


@pytest.fixture
def api() -> ApiClient:
    # Reflectors are built but never run: the ApiClient is never used.
    return cast(ApiClient, None)


def _scoped(api: ApiClient, namespaces: tuple[str, ...]) -> Scoped[Rec]:
    return Scoped(
        lambda ns: Reflector(
            api,
            PODS,
            transform=lambda _raw: None,
            namespace=ns,
            indexers={"job": lambda r: [r.job]},
            registry=CollectorRegistry(),
        ),
        namespaces,
    )


def test_one_reflector_per_namespace_each_watching_its_own(api: ApiClient) -> None:
    scoped = _scoped(api, ("a", "b", "a"))
    assert [r.namespace for r in scoped] == ["a", "b"]
    assert [r.namespace for r in _scoped(api, ())] == [None]


def test_reads_go_to_the_store_of_the_keys_namespace(api: ApiClient) -> None:
    scoped = _scoped(api, ("a", "b"))
    stores = {r.namespace: r.store for r in scoped}
    stores["a"].put("a/p1", Rec("p1", "job/a/x"))
    stores["b"].put("b/p1", Rec("p1", "job/b/x"))
    stores["b"].put("b/p2", Rec("p2", "job/b/x"))
    assert scoped.get("a/p1") == Rec("p1", "job/a/x")
    assert scoped.get("b/p2") == Rec("p2", "job/b/x")
    assert scoped.get("a/p2") is None  # only b has p2
    assert scoped.get("c/p1") is None  # c is not watched
    assert scoped.by_index("job", "job/b/x", namespace="b") == [Rec("p1", "job/b/x"), Rec("p2", "job/b/x")]
    assert scoped.by_index("job", "job/b/x", namespace="a") == []
    assert scoped.by_index("job", "job/c/x", namespace="c") == []
    assert len(scoped) == 3 and sorted(r.name for r in scoped.list()) == ["p1", "p1", "p2"]


def test_all_namespaces_is_one_store_for_every_key(api: ApiClient) -> None:
    scoped = _scoped(api, ())
    (only,) = scoped
    only.store.put("c/p1", Rec("p1", "job/c/x"))
    assert scoped.get("c/p1") == Rec("p1", "job/c/x")
    assert scoped.by_index("job", "job/c/x", namespace="c") == [Rec("p1", "job/c/x")]
