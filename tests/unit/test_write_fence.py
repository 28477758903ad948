"""The write fence of the daemon's API client: no ConfigMap write or pod patch is sent while it is shut."""

from __future__ import annotations

from typing import Any

import pytest

from agent.api import NotLeader
from ringcontroller.kube import RestKubeAPI


class Recorder:
    """Stands in for ``ApiClient``: records what would have been sent, answers nothing."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def call_api(self, path: str, method: str, **_: Any) -> Any:
        self.sent.append((method, path))
        raise ConnectionError("not connected")  # a transport failure: the request was attempted


def writes(api: RestKubeAPI) -> list[Any]:
    return [
        api.create_configmap("ns", {"metadata": {"name": "rings-config-a"}}),
        api.replace_configmap("ns", "rings-config-a", {"metadata": {"name": "rings-config-a"}}),
        api.annotate_pod("ns", "a-0", uid="u", annotations={"ring-controller.io/epoch": "1"}),
    ]


async def test_shut_fence_refuses_every_write_without_sending_it() -> None:
    client = Recorder()
    api = RestKubeAPI(client)  # type: ignore[arg-type]
    api.may_write = lambda: False
    for call in writes(api):
        with pytest.raises(NotLeader, match="no longer holds the leader Lease"):
            await call
    assert client.sent == []
    # Reads and the Lease's own requests are not fenced.
    with pytest.raises(ConnectionError, match="^not connected$"):
        await api.get_configmap("ns", "rings-config-a")
    with pytest.raises(ConnectionError, match="^not connected$"):
        await api.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", body={})
    assert [m for m, _ in client.sent] == ["GET", "PUT"]


async def test_open_fence_sends_the_writes() -> None:
    client = Recorder()
    api = RestKubeAPI(client)  # type: ignore[arg-type]
    for call in writes(api):
        with pytest.raises(ConnectionError, match="^not connected$"):
            await call
    assert [m for m, _ in client.sent] == ["POST", "PUT", "PATCH"]
