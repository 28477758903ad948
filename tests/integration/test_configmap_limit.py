"""The limit :func:`ranktable.stored.pack` fits against, on the real API server: at most 1 MiB of values.

``pack`` keeps files plain when they are *at most* ``CONFIGMAP_DATA_LIMIT``
bytes; this checks the API server draws the line at the same byte: a
ConfigMap whose values (``data`` and ``binaryData`` together) are exactly
the limit is stored, one byte more is refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from model.keys import CONFIGMAP_DATA_LIMIT
from ranktable.stored import pack

pytestmark = pytest.mark.integration


def _body(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": data}


def test_values_of_exactly_the_limit_are_stored_and_one_byte_more_is_refused(k8s: Any, namespace: str) -> None:
    text = "x" * (CONFIGMAP_DATA_LIMIT - 10)
    files = {"cluster.json": text[:600_000], "hccl.json": text[600_000:] + "y" * 10}
    stored = pack(files, limit=CONFIGMAP_DATA_LIMIT)
    assert not stored.compressed and stored.stored_bytes == CONFIGMAP_DATA_LIMIT
    k8s.core.create_namespaced_config_map(namespace, _body("at-limit", stored.data))
    assert len(k8s.core.read_namespaced_config_map("at-limit", namespace).data["hccl.json"]) == len(files["hccl.json"])
    over = dict(stored.data, **{"hccl.json": stored.data["hccl.json"] + "z"})
    with pytest.raises(ApiException, match="Unprocessable Entity") as refused:
        k8s.core.create_namespaced_config_map(namespace, _body("over-limit", over))
    assert refused.value.status == 422 and "may not be more than 1048576 bytes" in str(refused.value.body)
