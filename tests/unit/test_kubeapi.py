"""The launcher's own HTTP/1.1 (:mod:`ranktable.launch.kubeapi`) on plain bytes.

The reader (:class:`~ranktable.launch.kubeapi.Response`) reads answers from
``io.BytesIO`` or one end of a ``socket.socketpair``; the client
(:class:`~ranktable.launch.kubeapi.KubeClient`) gets socketpairs instead of TCP
connections, their far ends holding the answers written before it asks.
Against the real API server: tests/integration/test_launcher_api.py and
test_self_register_policy.py.
"""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator

import pytest

from ranktable.launch.kubeapi import (
    ApiStatusError,
    HttpProtocolError,
    KubeClient,
    Response,
    ServerClosedError,
    query_string,
    quote,
    request_head,
)
from ranktable.launch.kubeconfig import ClientConfig

CONFIG = ClientConfig(host="api.example", port=6443, where="test", tls=False, token="sekret")


def response(data: bytes) -> Response:
    return Response(io.BytesIO(data))


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{header}\r\n" for header in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{head}".encode() + b"\r\n" + body


def ok_json(value: object, *headers: str) -> bytes:
    body = json.dumps(value).encode()
    return ok(body, f"Content-Length: {len(body)}", *headers)


def chunked(*chunks: bytes, tail: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + tail


# --- the reader -------------------------------------------------------------------------------


def test_content_length_reads_exactly_the_body_and_leaves_the_next_answer() -> None:
    stream = io.BytesIO(ok(b'{"a":1}', "content-LENGTH: 7") + ok(b"{}", "Content-Length: 2"))
    first = Response(stream)
    assert (first.status, first.reason, first.headers["content-type"]) == (200, "OK", "application/json")
    assert first.read() == b'{"a":1}'
    assert first.done and not first.will_close
    assert Response(stream).read() == b"{}"  # the same connection: the next answer starts right after


def test_chunked_lines_split_across_chunks_and_several_in_one_chunk() -> None:
    body = chunked(b'{"n":1}\n{"n"', b":2}\n", b'{"n":3}\n{"n":4}\n{"n":5}\n', b'{"n":6}')
    stream = io.BytesIO(ok(body, "Transfer-Encoding: chunked") + ok(b"{}", "Content-Length: 2"))
    answer = Response(stream)
    lines = list(answer.lines())
    assert [json.loads(line)["n"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert lines[0] == b'{"n":1}\n' and lines[-1] == b'{"n":6}'  # the last line needs no newline
    assert answer.done and not answer.will_close
    assert Response(stream).read() == b"{}"


def test_chunk_extensions_and_trailers_are_read_past() -> None:
    body = b'5;name=value\r\n{"a":\r\n3 ; x\r\n12}\r\n0;last\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n'
    stream = io.BytesIO(ok(body, "TRANSFER-encoding: Chunked") + ok(b"{}", "Content-Length: 2"))
    assert json.loads(Response(stream).read()) == {"a": 12}
    assert Response(stream).read() == b"{}"  # the trailers were consumed up to their empty line


def test_lines_come_as_soon_as_complete_before_the_stream_ends() -> None:
    server, client = socket.socketpair()
    with server, client:
        client.settimeout(5)  # a reader that waited for more would raise here, not hang
        server.sendall(ok(b"", "Transfer-Encoding: chunked") + chunked(b'{"n":1}\n{"n', tail=b""))
        lines = Response(client.makefile("rb")).lines()
        assert next(lines) == b'{"n":1}\n'
        server.sendall(chunked(b'":2}\n', tail=b""))
        assert next(lines) == b'{"n":2}\n'
        server.sendall(b"0\r\n\r\n")
        assert list(lines) == []


def test_a_body_without_length_or_chunking_ends_with_the_connection() -> None:
    answer = response(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"a":1}\n{"b":2}')
    assert answer.will_close
    assert list(answer.lines()) == [b'{"a":1}\n', b'{"b":2}']
    assert answer.done


@pytest.mark.parametrize(
    ("status_line", "header", "closes"),
    [
        ("HTTP/1.1 200 OK", "Connection: keep-alive", False),
        ("HTTP/1.1 200 OK", "Connection: Close", True),
        ("HTTP/1.1 200 OK", "connection: upgrade, close", True),
        ("HTTP/1.0 200 OK", "X-Nothing: here", True),
    ],
)
def test_connection_close_and_http_1_0_mean_close_after(status_line: str, header: str, closes: bool) -> None:
    answer = response(f"{status_line}\r\n{header}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    assert answer.read() == b"{}"
    assert answer.will_close is closes


def test_interim_1xx_answers_are_skipped() -> None:
    answer = response(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"{}", "Content-Length: 2"))
    assert (answer.status, answer.read()) == (200, b"{}")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (ok(b"", "Transfer-Encoding: chunked") + b'10\r\n{"n":1}\n', "before the end of the chunk"),
        (ok(b"", "Transfer-Encoding: chunked") + chunked(b"{}", tail=b""), "before the chunk size line"),
        (ok(b"", "Transfer-Encoding: chunked") + b"2\r\n{}XX0\r\n\r\n", "not followed by CRLF"),
        (ok(b"", "Transfer-Encoding: chunked") + b"0x2\r\n{}\r\n0\r\n\r\n", "bad chunk size"),
        (ok(b"", "Transfer-Encoding: chunked") + b"-2\r\n{}\r\n0\r\n\r\n", "bad chunk size"),
        (ok(b"", "Transfer-Encoding: chunked") + b"0\r\nX-Trailer: 1\r\n", "before the trailer line"),
        (ok(b'{"a"', "Content-Length: 7"), "3 bytes before the end of the body"),
    ],
    ids=["chunk", "no-last-chunk", "chunk-crlf", "hex-prefix", "negative", "trailers", "content-length"],
)
def test_a_truncated_or_malformed_body_is_a_protocol_error(data: bytes, says: str) -> None:
    answer = response(data)
    with pytest.raises(HttpProtocolError, match=says) as raised:
        list(answer.lines())
    assert isinstance(raised.value, OSError)  # transport trouble: the launcher's loop retries it
    assert not answer.done


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"HTTP/1.1 2000 OK\r\n\r\n", "bad status line"),
        (b"SPDY/3 200 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n", "unsupported Content-Enc"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", "ended before the header line"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "longer than 65536"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100 header lines"),
    ],
)
def test_a_malformed_head_is_a_protocol_error(data: bytes, says: str) -> None:
    with pytest.raises(HttpProtocolError, match=says):
        response(data)


def test_a_connection_closed_before_the_answer_is_server_closed() -> None:
    with pytest.raises(ServerClosedError, match="ended before the status line") as raised:
        response(b"")
    assert isinstance(raised.value, ConnectionResetError)  # what the client retries once on a kept-alive connection
    with pytest.raises(HttpProtocolError, match="ended in a status line"):
        response(b"HTTP/1.1 20")


def test_read_with_a_limit_stops_there() -> None:
    assert response(ok(b"x" * 100, "Content-Length: 100")).read(10) == b"x" * 10


# --- encoding ---------------------------------------------------------------------------------


def test_quote_encodes_everything_outside_unreserved_characters() -> None:
    assert quote("team-a.b_c~9") == "team-a.b_c~9"
    assert quote("a b/c?d#e%f&g=h+é") == "a%20b%2Fc%3Fd%23e%25f%26g%3Dh%2B%C3%A9"
    query = {"fieldSelector": "metadata.name=rings-config-x", "watch": "true", "x y": "1&2"}
    assert query_string(query) == "fieldSelector=metadata.name%3Drings-config-x&watch=true&x%20y=1%262"


# --- the client on socketpairs ----------------------------------------------------------------


class Wire:
    """Stands in for the network: connection ``i`` the client opens is a socketpair whose far end
    already holds ``answers[i]`` (None: it ends its side at once); ``sent(i)`` is what the client wrote on it."""

    def __init__(self, client: KubeClient, *answers: bytes | None) -> None:
        self.ends: list[socket.socket] = []
        self._pending = list(answers)
        client._open = self._open  # type: ignore[method-assign]

    def _open(self) -> socket.socket:
        if not self._pending:
            raise AssertionError("the client opened more connections than the test expected")
        near, far = socket.socketpair()
        near.settimeout(5)
        answer = self._pending.pop(0)
        if answer is None:
            far.shutdown(socket.SHUT_WR)
        else:
            far.sendall(answer)
        self.ends.append(far)
        return near

    def sent(self, index: int) -> bytes:
        far = self.ends[index]
        far.setblocking(False)
        data = b""
        while True:
            try:
                piece = far.recv(65536)
            except BlockingIOError:
                return data
            if not piece:
                return data
            data += piece

    def close(self) -> None:
        for end in self.ends:
            end.close()


@pytest.fixture
def client() -> Iterator[KubeClient]:
    client = KubeClient(CONFIG, connect_timeout=5)
    yield client
    client.close()


def test_requests_are_written_in_full_and_a_kept_alive_connection_is_reused(client: KubeClient) -> None:
    wire = Wire(client, ok_json({"n": 1}) + ok_json({"n": 2}))
    try:
        assert client.get_json("/api/v1/namespaces/a/configmaps", {"fieldSelector": "metadata.name=x"}, timeout=5) == {
            "n": 1
        }
        assert client.patch_merge("/api/v1/namespaces/a/pods/p", {"a": 1}, timeout=5) == {"n": 2}
        assert len(wire.ends) == 1  # both went out on the one connection
        assert wire.sent(0) == (
            b"GET /api/v1/namespaces/a/configmaps?fieldSelector=metadata.name%3Dx HTTP/1.1\r\n"
            b"Host: api.example:6443\r\nAccept: application/json\r\nUser-Agent: ring-launch\r\n"
            b"Authorization: Bearer sekret\r\n\r\n"
            b"PATCH /api/v1/namespaces/a/pods/p HTTP/1.1\r\n"
            b"Host: api.example:6443\r\nAccept: application/json\r\nUser-Agent: ring-launch\r\n"
            b"Authorization: Bearer sekret\r\nContent-Type: application/merge-patch+json\r\nContent-Length: 7\r\n\r\n"
            b'{"a":1}'
        )
    finally:
        wire.close()


@pytest.mark.parametrize("how", ["closed", "half-closed"])
def test_a_kept_alive_connection_the_server_closed_gets_one_retry_on_a_new_one(client: KubeClient, how: str) -> None:
    wire = Wire(client, ok_json({"n": 1}), ok_json({"n": 2}))
    try:
        assert client.get_json("/x", {}, timeout=5) == {"n": 1}
        if how == "closed":
            wire.sent(0)
            wire.ends[0].close()  # the next request's write fails (EPIPE)
        else:
            wire.ends[0].shutdown(socket.SHUT_WR)  # the write succeeds, the answer is an end of stream
        assert client.get_json("/y", {}, timeout=5) == {"n": 2}
        assert len(wire.ends) == 2
        assert wire.sent(1).startswith(b"GET /y HTTP/1.1\r\n")
    finally:
        wire.close()


def test_a_new_connection_the_server_closes_is_not_retried(client: KubeClient) -> None:
    wire = Wire(client, None, ok_json({"n": 2}))
    try:
        with pytest.raises(ServerClosedError, match="ended before the status line"):
            client.get_json("/x", {}, timeout=5)
        assert len(wire.ends) == 1
    finally:
        wire.close()


def test_a_refusal_raises_api_status_error_with_the_status_message_and_drops_the_connection(
    client: KubeClient,
) -> None:
    status = {"kind": "Status", "status": "Failure", "message": 'pods "p" is forbidden: no', "code": 403}
    body = json.dumps(status).encode()
    refusal = b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    wire = Wire(client, refusal, ok_json({"n": 2}))
    try:
        with pytest.raises(ApiStatusError, match="^403 Forbidden") as raised:
            client.patch_merge("/p", {}, timeout=5)
        assert (raised.value.status, raised.value.reason) == (403, "Forbidden")
        assert raised.value.message == 'pods "p" is forbidden: no'
        assert str(raised.value) == '403 Forbidden: pods "p" is forbidden: no'
        assert client.get_json("/x", {}, timeout=5) == {"n": 2}
        assert len(wire.ends) == 2  # the refused connection was not reused
    finally:
        wire.close()


def test_a_connection_close_answer_is_not_reused(client: KubeClient) -> None:
    wire = Wire(client, ok_json({"n": 1}, "Connection: close"), ok_json({"n": 2}))
    try:
        assert client.get_json("/x", {}, timeout=5) == {"n": 1}
        assert client.get_json("/y", {}, timeout=5) == {"n": 2}
        assert len(wire.ends) == 2
        assert wire.sent(1).startswith(b"GET /y ")
    finally:
        wire.close()


def test_stream_yields_the_watch_events_and_closes(client: KubeClient) -> None:
    events = [{"type": "ADDED", "object": {"n": 1}}, {"type": "BOOKMARK", "object": {"n": 2}}]
    lines = [json.dumps(event).encode() + b"\n" for event in events]
    wire = Wire(client, ok(chunked(lines[0][:5], lines[0][5:] + lines[1]), "Transfer-Encoding: chunked"))
    try:
        assert list(client.stream("/w", {"watch": "true"}, timeout=5)) == events
        assert client._conn is None
    finally:
        wire.close()


def test_the_first_request_in_two_steps_keeps_its_connection_for_the_next(client: KubeClient) -> None:
    wire = Wire(client, ok_json({"patched": True}) + ok_json({"items": []}))
    try:
        client.send_first("/api/v1/namespaces/a/pods/p", {"a": 1})
        assert wire.sent(0).startswith(b"PATCH /api/v1/namespaces/a/pods/p HTTP/1.1\r\n")
        with pytest.raises(RuntimeError, match="still unread"):
            client.get_json("/x", {}, timeout=5)
        assert client.answer_first(timeout=5) == {"patched": True}
        assert client.get_json("/x", {}, timeout=5) == {"items": []}
        assert len(wire.ends) == 1
    finally:
        wire.close()


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        pytest.param("/api\r\nX-Evil: 1", {}, id="target"),
        pytest.param("/api", {"Authorization": "Bearer abc\r\nX-Evil: 1"}, id="header-value"),
        pytest.param("/api", {"X-A\nB": "v"}, id="header-name"),
    ],
)
def test_a_line_break_never_reaches_the_request(target: str, headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="a line break in the request"):
        request_head("GET", target, headers)
    assert request_head("GET", "/api", {"Host": "h"}) == b"GET /api HTTP/1.1\r\nHost: h\r\n\r\n"
