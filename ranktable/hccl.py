"""HCCL rank tables (``hccl.json``): render either version, read either back.

Ascend's collective library (HCCL) learns the ring from a rank table file
named by ``RANK_TABLE_FILE``. HCCL-Controller (MindX DL) writes it into the
``hccl.json`` key of the job's ConfigMap in one of two layouts, and training
containers poll it until ``"status": "completed"``. We write the same layouts,
field names and string-typed numbers, so existing images and scripts keep
working:

* **v2** (default; the table's own ``"version": "1.0"``): one ``server_list``
  entry per member pod, each with its ``device`` list carrying a global
  ``rank_id``. See :mod:`ranktable.hccl_v2`.
* **v1**: ``group_list`` of groups with ``instance_list`` entries per pod and
  no explicit rank ids (HCCL numbers devices in list order). See
  :mod:`ranktable.hccl_v1`.

Both are derived from the :class:`~ranktable.clusterspec.ClusterSpec`, never
kept as separate state: the table's status mirrors the spec's, and its order
is the spec's rank order, so ``cluster.json`` and ``hccl.json`` can never
disagree about who is rank 0.

Initializing tables. HCCL-Controller writes nothing until the table is
complete except after a pod deletion, when it writes an ``initializing`` table
holding the pods still known; users pre-create the ConfigMap with just
``{"status": "initializing"}``. We follow the first behaviour for every
update: an initializing table lists the members known so far that already
carry devices and a server id (rank ids in it are provisional and consumers
must not use them). :func:`read_hccl` accepts all three shapes.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ranktable import hccl_v1, hccl_v2
from ranktable.clusterspec import STATUS_INITIALIZING, STATUSES, ClusterSpec, SpecError, validate_spec

VERSIONS: Final = ("v1", "v2")
DEFAULT_VERSION: Final = "v2"


def render_hccl(spec: ClusterSpec, *, version: str = DEFAULT_VERSION, validated: bool = False) -> str:
    """The ``hccl.json`` text for ``spec`` in layout ``version`` (``"v1"`` or ``"v2"``).

    Deterministic, like :func:`~ranktable.clusterspec.spec_to_json`. Raises
    :class:`SpecError` if the spec is invalid, or if it is completed while a
    member lacks devices or a server id (such a table would be silently
    wrong), and :class:`ValueError` for an unknown version. ``validated``:
    the caller has just rendered the same spec with ``spec_to_json`` (which
    validates it), so the full check is not repeated; the table's own checks
    still run.
    """
    if not validated:
        validate_spec(spec)
    if version == "v2":
        table = hccl_v2.render(spec)
    elif version == "v1":
        table = hccl_v1.render(spec)
    else:
        raise ValueError(f"unknown rank table version {version!r}; expected one of {', '.join(VERSIONS)}")
    return json.dumps(table, separators=(",", ":"), ensure_ascii=False)


def read_hccl(text: str) -> dict[str, Any]:
    """Parse and validate an ``hccl.json`` text of either layout; return the JSON object.

    Also accepts the placeholder ``{"status": "initializing"}``. Raises
    :class:`SpecError` naming what is wrong. A completed table must be
    consistent: counts match the lists and (v2) rank ids are exactly
    ``0..N-1``.
    """
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as err:  # also numbers over the digit limit, nesting too deep
        raise SpecError(f"hccl.json: not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise SpecError("hccl.json: expected a JSON object")
    status = raw.get("status")
    if status not in STATUSES:
        raise SpecError(f"hccl.json status: {status!r} is not one of {', '.join(STATUSES)}")
    if "server_list" in raw or "version" in raw:
        hccl_v2.validate(raw)
    elif "group_list" in raw or "group_count" in raw:
        hccl_v1.validate(raw)
    elif status != STATUS_INITIALIZING:
        raise SpecError("hccl.json: a completed table needs server_list (v2) or group_list (v1)")
    return raw


def hccl_version(table: dict[str, Any]) -> str | None:
    """``"v2"``, ``"v1"`` or None (placeholder) for a table :func:`read_hccl` accepted."""
    if "server_list" in table or "version" in table:
        return "v2"
    if "group_list" in table or "group_count" in table:
        return "v1"
    return None
