"""The launcher's HTTP (:mod:`ranktable.launch.kubeapi`, on ``http.client``) against a scripted server on loopback.

Each test names what the client must do with what a server sends: one
kept-alive connection, one retry when the server dropped it, refusals with
their ``Status`` message, watch lines as they come; and the caps: an answer
too big, a line without end, endless ``100 Continue`` answers or trailers, an
answer that cannot be framed each raise one line (an ``OSError``, which the
watch loop retries with backoff) after a bounded read. The caps are set
small here (``monkeypatch``); the server sends several times the cap, so a
client without the cap reads it all and the test fails on what it returns.
The 401 rule (read the token file again, try once more) is checked through
:class:`~ranktable.launch.apiwatch.ApiSource`. TLS: test_kubeapi_tls.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ranktable.launch import apiwatch, kubeapi
from ranktable.launch.apiwatch import ApiAccessError, ApiSource
from ranktable.launch.kubeapi import AnswerTooLarge, ApiStatusError, HttpProtocolError, KubeClient
from ranktable.launch.kubeconfig import ClientConfig
from tests.support.loopback import Answer, Loopback, Reply, Request, answer, chunked


def ok_json(value: object, *headers: str) -> bytes:
    return answer("200 OK", json.dumps(value).encode(), "Content-Type: application/json", *headers)


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[Loopback, KubeClient]]]:
    """``serve(handler, token=...)``: a loopback server and a plain-HTTP client of it."""
    made: list[tuple[Loopback, KubeClient]] = []

    def make(handler: Callable[[Request], Answer], *, token: str = "sekret") -> tuple[Loopback, KubeClient]:
        server = Loopback(handler)
        config = ClientConfig(host="127.0.0.1", port=server.port, where="test", tls=False, token=token)
        made.append((server, KubeClient(config, connect_timeout=5)))
        return made[-1]

    yield make
    for server, client in made:
        client.close()
        server.close()


def scripted(*answers: Answer) -> Callable[[Request], Answer]:
    """A handler that gives ``answers`` in order, one per request."""
    pending = list(answers)
    return lambda _request: pending.pop(0)


# --- requests and connections --------------------------------------------------------------------


def test_requests_go_out_whole_on_one_kept_alive_connection(serve: Callable[..., tuple[Loopback, KubeClient]]) -> None:
    server, client = serve(scripted(ok_json({"n": 1}), ok_json({"n": 2})))
    path = "/api/v1/namespaces/a/configmaps"
    assert client.get_json(path, {"fieldSelector": "metadata.name=x y"}, timeout=5) == {"n": 1}
    assert client.patch_merge("/api/v1/namespaces/a/pods/p", {"a": 1}, timeout=5) == {"n": 2}
    first, second = server.requests
    assert (first.method, first.target) == ("GET", f"{path}?fieldSelector=metadata.name%3Dx%20y")
    assert (second.method, second.target, second.body) == ("PATCH", "/api/v1/namespaces/a/pods/p", b'{"a":1}')
    assert second.headers["content-type"] == "application/merge-patch+json"
    for request in (first, second):
        assert request.headers["host"] == f"127.0.0.1:{server.port}"
        assert request.headers["authorization"] == "Bearer sekret"
        assert request.headers["accept"] == "application/json"
        assert request.headers["user-agent"] == "ring-launch"
        assert request.headers.get("accept-encoding", "identity") == "identity"
    assert server.connections == 1


def test_a_kept_alive_connection_the_server_dropped_gets_one_retry_on_a_new_one(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    # The first answer keeps the connection by HTTP/1.1's rules, but the server ends it right after.
    server, client = serve(scripted(Reply(ok_json({"n": 1}), close=True), ok_json({"n": 2})))
    assert client.get_json("/x", {}, timeout=5) == {"n": 1}
    assert client.get_json("/y", {}, timeout=5) == {"n": 2}
    assert [(r.conn, r.target) for r in server.requests] == [(0, "/x"), (1, "/y")]


def test_a_new_connection_the_server_ends_unanswered_is_not_retried(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    server, client = serve(scripted(None, ok_json({"n": 2})))
    with pytest.raises(ConnectionResetError, match="closed connection without response"):  # RemoteDisconnected
        client.get_json("/x", {}, timeout=5)
    assert len(server.requests) == 1


def test_a_refusal_raises_with_the_status_message_and_drops_the_connection(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    status = {"kind": "Status", "status": "Failure", "message": 'pods "p" is forbidden: no', "code": 403}
    server, client = serve(scripted(answer("403 Forbidden", json.dumps(status).encode()), ok_json({"n": 2})))
    with pytest.raises(ApiStatusError, match="^403 Forbidden") as raised:
        client.patch_merge("/p", {}, timeout=5)
    assert (raised.value.status, raised.value.reason, raised.value.message) == (403, "Forbidden", status["message"])
    assert str(raised.value) == '403 Forbidden: pods "p" is forbidden: no'
    assert client.get_json("/x", {}, timeout=5) == {"n": 2}
    assert server.connections == 2


def test_an_answer_that_says_connection_close_is_not_reused(serve: Callable[..., tuple[Loopback, KubeClient]]) -> None:
    server, client = serve(scripted(Reply(ok_json({"n": 1}, "Connection: close"), close=True), ok_json({"n": 2})))
    assert client.get_json("/x", {}, timeout=5) == {"n": 1}
    assert client.get_json("/y", {}, timeout=5) == {"n": 2}
    assert server.connections == 2


def test_a_watch_yields_each_event_line_across_chunks_then_closes(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    events = [{"type": "ADDED", "object": {"n": 1}}, {"type": "BOOKMARK", "object": {"n": 2}}]
    one, two = (json.dumps(event).encode() + b"\n" for event in events)
    stream = answer("200 OK", b"", "Transfer-Encoding: chunked") + chunked(one[:5], one[5:] + two[:3], two[3:])
    server, client = serve(scripted(stream))
    assert list(client.stream("/w", {"watch": "true"}, timeout=5)) == events
    assert client._conn is None  # watch connections are not reused


def test_the_first_request_in_two_steps_keeps_its_connection_for_the_next(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    server, client = serve(scripted(ok_json({"patched": True}), ok_json({"items": []})))
    client.send_first("/api/v1/namespaces/a/pods/p", {"a": 1})
    with pytest.raises(RuntimeError, match="still unread"):
        client.get_json("/x", {}, timeout=5)
    assert client.answer_first(timeout=5) == {"patched": True}
    assert client.get_json("/x", {}, timeout=5) == {"items": []}
    assert [(r.conn, r.method) for r in server.requests] == [(0, "PATCH"), (0, "GET")]


@pytest.mark.parametrize("token", ["abc\r\nX-Evil: 1", "abc\nX-Evil: 1"])
def test_a_line_break_in_the_token_never_reaches_the_wire(
    serve: Callable[..., tuple[Loopback, KubeClient]], token: str
) -> None:
    server, client = serve(scripted(ok_json({})), token=token)
    with pytest.raises(ValueError, match="(?i)header"):
        client.get_json("/x", {}, timeout=5)
    assert server.requests == []


# --- caps ------------------------------------------------------------------------------------------


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubeapi, "MAX_HEAD", 4096)
    monkeypatch.setattr(kubeapi, "MAX_BODY", 1000)
    monkeypatch.setattr(kubeapi, "MAX_LINE", 1000)
    monkeypatch.setattr(kubeapi, "FRAMING", 4096)


def _big_object() -> bytes:
    return json.dumps({"data": "x" * 20_000}).encode()


@pytest.mark.usefixtures("small_caps")
@pytest.mark.parametrize(
    "framed",
    [
        pytest.param(answer("200 OK", _big_object()), id="content-length"),
        pytest.param(
            answer("200 OK", b"", "Transfer-Encoding: chunked")
            + chunked(*[_big_object()[i : i + 500] for i in range(0, 20_012, 500)]),
            id="chunked",
        ),
        pytest.param(
            Reply(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + _big_object(), close=True), id="until-close"
        ),
    ],
)
def test_a_body_past_its_cap_is_refused_after_a_bounded_read(
    serve: Callable[..., tuple[Loopback, KubeClient]], framed: Answer
) -> None:
    server, client = serve(scripted(framed, ok_json({"n": 2})))
    with pytest.raises(
        AnswerTooLarge, match=r"^GET /x: .*(longer than|ran past) \d+ bytes( \(Content-Length: 20012\))?$"
    ):
        client.get_json("/x", {}, timeout=5)
    assert client.get_json("/y", {}, timeout=5) == {"n": 2}  # on a new connection: the capped one was dropped
    assert server.connections == 2


@pytest.mark.usefixtures("small_caps")
def test_a_watch_line_without_end_is_refused_at_its_cap(serve: Callable[..., tuple[Loopback, KubeClient]]) -> None:
    endless = [answer("200 OK", b"", "Transfer-Encoding: chunked")] + [chunked(b"x" * 256, last=False)] * 100
    server, client = serve(scripted(Reply(endless + [chunked(b"\n")])))
    with pytest.raises(AnswerTooLarge, match=r"^GET /w \(watch\): an event line longer than 1000 bytes$"):
        list(client.stream("/w", {}, timeout=5))
    assert client._conn is None


@pytest.mark.usefixtures("small_caps")
def test_a_watch_line_in_tiny_chunks_with_long_extensions_is_refused_at_its_budget(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    # http.client takes chunk-size lines of up to 64 KiB: the framing is counted too.
    extension = b";x=" + b"y" * 2000
    pieces = [answer("200 OK", b"", "Transfer-Encoding: chunked")] + [b"1" + extension + b"\r\nx\r\n"] * 100
    server, client = serve(scripted(Reply(pieces + [chunked(b"\n")])))
    with pytest.raises(AnswerTooLarge, match=r"an event line with its chunk framing ran past 5096 bytes"):
        list(client.stream("/w", {}, timeout=5))


@pytest.mark.usefixtures("small_caps")
def test_endless_100_continue_answers_are_refused_at_the_head_cap(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    interim = b"HTTP/1.1 100 Continue\r\nX-Pad: " + b"p" * 100 + b"\r\n\r\n"
    server, client = serve(scripted(Reply([interim] * 200 + [ok_json({"n": 1})])))  # 25 KB of them, then an answer
    with pytest.raises(AnswerTooLarge, match=r"^the answer's head .* ran past 4096 bytes$"):
        client.get_json("/x", {}, timeout=5)


@pytest.mark.usefixtures("small_caps")
def test_endless_trailer_lines_are_refused_within_the_body_budget(
    serve: Callable[..., tuple[Loopback, KubeClient]],
) -> None:
    trailers = [answer("200 OK", b"", "Transfer-Encoding: chunked"), b"2\r\n{}\r\n0\r\n"] + [b"X-T: y\r\n"] * 2000
    server, client = serve(scripted(Reply([*trailers, b"\r\n"])))
    with pytest.raises(AnswerTooLarge, match=r"^GET /x: the body with its chunk framing ran past 5096 bytes$"):
        client.get_json("/x", {}, timeout=5)


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (b"HTTP/1.1 2000 OK\r\n\r\n", "BadStatusLine"),
        (b"SPDY/3 200 OK\r\n\r\n", "BadStatusLine"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "LineTooLong"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100 headers"),
        (answer("200 OK", b"", "Transfer-Encoding: chunked") + b"zz\r\n{}\r\n0\r\n\r\n", "IncompleteRead|ValueError"),
        (answer("200 OK", b"{}", "Content-Encoding: gzip"), "unsupported Content-Encoding 'gzip'"),
        (Reply(answer("200 OK", b'{"a"', "Content-Length: 7"), close=True), r"IncompleteRead\(4 bytes read, 3 more"),
        (Reply(answer("200 OK", b"", "Transfer-Encoding: chunked") + b"10\r\n{}", close=True), "IncompleteRead"),
    ],
    ids=["status-code", "protocol", "long-header", "headers", "chunk-size", "gzip", "content-length", "chunk"],
)
def test_an_answer_that_cannot_be_framed_is_one_line_and_drops_the_connection(
    serve: Callable[..., tuple[Loopback, KubeClient]], reply: Answer, says: str
) -> None:
    server, client = serve(scripted(reply, ok_json({"n": 2})))
    with pytest.raises(HttpProtocolError, match="^GET /x: ") as raised:
        client.get_json("/x", {}, timeout=5)
    message = str(raised.value)
    assert message.startswith("GET /x: ") and "\n" not in message and len(message) < 300
    assert re.search(says, message)
    assert isinstance(raised.value, OSError)  # transport trouble: the watch loop retries it
    assert client.get_json("/y", {}, timeout=5) == {"n": 2}
    assert server.requests[-1].conn == 1


def test_a_capped_answer_is_one_log_line_and_a_retry_with_backoff(
    serve: Callable[..., tuple[Loopback, KubeClient]], small_caps: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apiwatch, "BACKOFF_FIRST", 0.01)
    too_big = answer("200 OK", _big_object())
    listed = ok_json({"metadata": {"resourceVersion": "7"}, "items": []})
    server, client = serve(scripted(too_big, listed))
    lines: list[str] = []
    source = ApiSource(namespace="a", name="rings-config-x", log=lines.append, client=client)
    observations = source.observe(time.monotonic() + 30)
    assert next(observations).cluster is None  # the second list came through
    assert len(lines) == 1, lines
    assert lines[0].startswith("ConfigMap a/rings-config-x: AnswerTooLarge: GET /api/v1/namespaces/a/configmaps: ")
    assert lines[0].endswith("; retrying in 0.0s")
    assert [r.conn for r in server.requests] == [0, 1]


# --- a 401 reads the token file again and tries once more ----------------------------------------


def rotating(token_file: Path, *, accepts: str, rotations: list[str]) -> Callable[[Request], Answer]:
    """A server that takes only token ``accepts``; each refusal (401) rotates the token file to the next of ``rotations``."""

    def handle(request: Request) -> Answer:
        if request.headers.get("authorization") == f"Bearer {accepts}":
            return ok_json({"metadata": {"resourceVersion": "7"}, "items": []})
        if rotations:
            token_file.write_text(rotations.pop(0) + "\n")  # the kubelet rotates the bound token in place
        status = {"kind": "Status", "code": 401, "message": "Unauthorized"}
        return answer("401 Unauthorized", json.dumps(status).encode())

    return handle


def token_source(tmp_path: Path, *, accepts: str, rotations: list[str]) -> tuple[Loopback, ApiSource]:
    """A server as :func:`rotating` makes it, and a source whose client reads the token file, which says "old"."""
    token_file = tmp_path / "token"
    token_file.write_text("old\n")
    server = Loopback(rotating(token_file, accepts=accepts, rotations=rotations))
    config = ClientConfig(host="127.0.0.1", port=server.port, where="test", tls=False, token_file=str(token_file))
    return server, ApiSource(namespace="a", name="rings-config-x", client=KubeClient(config, connect_timeout=5))


def test_a_401_reads_the_token_file_again_and_tries_once_more(tmp_path: Path) -> None:
    server, source = token_source(tmp_path, accepts="new", rotations=["new"])
    try:
        observations = source.observe(time.monotonic() + 30)
        assert next(observations).cluster is None  # listed with the rotated token
        assert [r.headers["authorization"] for r in server.requests] == ["Bearer old", "Bearer new"]
    finally:
        server.close()


def test_a_second_401_in_a_row_is_final(tmp_path: Path) -> None:
    server, source = token_source(tmp_path, accepts="never", rotations=["newer", "newest"])
    try:
        with pytest.raises(ApiAccessError, match=r"refused to list it \(401 Unauthorized"):
            next(source.observe(time.monotonic() + 30))
        assert [r.headers["authorization"] for r in server.requests] == ["Bearer old", "Bearer newer"]
    finally:
        server.close()
