"""HCCL rank tables (``hccl.json``): render every version, read every version back.

Ascend's collective library (HCCL) learns the ring from a rank table file
named by ``RANK_TABLE_FILE``. The table goes into the ``hccl.json`` key of the
job's ConfigMap, and training containers poll it until ``"status":
"completed"``. Five layouts, by the name ``--ranktable-version`` gives them:

==========  ========================================================  ==========================
name        layout                                                    module
==========  ========================================================  ==========================
``1.0``     ascend-operator's table 1.0 (``server_list`` with          :mod:`~ranktable.hccl_table10`
            ``host_ip``, ``container_ip``, ``hardware_type``)
``1.2``     ascend-operator's table 1.2 for A3 super pods              :mod:`~ranktable.hccl_table10`
            (``super_device_id``, ``super_pod_list``)
``2.0``     ascend-operator's table 2.0 (``rank_list`` with            :mod:`~ranktable.hccl_table20`
            ``level_list``)
``v2``      HCCL-Controller's default (its table also says "1.0")      :mod:`~ranktable.hccl_v2`
``v1``      HCCL-Controller's ``group_list`` layout                     :mod:`~ranktable.hccl_v1`
==========  ========================================================  ==========================

``auto`` (the default) picks 1.0, 1.2 or 2.0 per job the way ascend-operator
does; the rule reads the workload, so it lives in :mod:`model.ascend`.

Every table is derived from the :class:`~ranktable.clusterspec.ClusterSpec`,
never kept as separate state: the table's status mirrors the spec's, and its
order is the spec's rank order, so ``cluster.json`` and ``hccl.json`` can never
disagree about who is rank 0.

Initializing tables. HCCL-Controller writes nothing until the table is
complete except after a pod deletion, when it writes an ``initializing`` table
holding the pods still known; users pre-create the ConfigMap with just
``{"status": "initializing"}``. We follow the first behaviour for every
update: an initializing table lists the members known so far that already
carry devices and a server id (rank ids in it are provisional and consumers
must not use them). :func:`read_hccl` accepts all these shapes, and
ascend-operator's initializing tables (no ``server_list``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ranktable import hccl_table10, hccl_table20, hccl_v1, hccl_v2
from ranktable.clusterspec import (
    STATUS_INITIALIZING,
    STATUSES,
    ClusterSpec,
    Device,
    SpecError,
    load_json,
    validate_spec,
)

if TYPE_CHECKING:
    from typing import Any, Final

#: Every layout :func:`render_hccl` writes.
VERSIONS: Final = (hccl_table10.VERSION_1_0, hccl_table10.VERSION_1_2, hccl_table20.VERSION_2_0, "v2", "v1")
#: ``--ranktable-version`` value: choose per job (see :mod:`model.ascend`).
AUTO: Final = "auto"
CHOICES: Final = (AUTO, *VERSIONS)
DEFAULT_CHOICE: Final = AUTO
#: The layout :func:`render_hccl` uses when given none.
DEFAULT_VERSION: Final = hccl_table10.VERSION_1_0
#: The layouts whose devices must all have an IP (1.2 only across super pods, 2.0 never).
NEEDS_DEVICE_IP: Final = frozenset({hccl_table10.VERSION_1_0, "v2", "v1"})


def device_problem(version: str, devices: tuple[Device, ...]) -> tuple[str, str] | None:
    """Why a pod's devices cannot go into a table of ``version``: ``(reason, message)``, or None.

    The reasons are :data:`ranktable.devices.REASONS` codes: ``device_ip`` for
    a placeholder IP in a layout that needs every IP, ``super_device_id`` for
    a device without one in table 1.2. (Table 1.2 also needs every IP when
    the job spans several super pods; only the whole job can tell, see
    :func:`ranktable.hccl_table10.render`.)
    """
    if version in NEEDS_DEVICE_IP:
        bad = [d for d in devices if not d.has_ip]
        if bad:
            return (
                "device_ip",
                f"device {bad[0].device_id} has the placeholder device_ip {bad[0].device_ip!r} "
                f"(the device plugin could not read it); rank table {version} needs every device's IP",
            )
    if version == hccl_table10.VERSION_1_2:
        bad = [d for d in devices if not d.super_device_id]
        if bad:
            return (
                "super_device_id",
                f"device {bad[0].device_id} has no super_device_id (missing or not a non-negative integer); "
                "rank table 1.2 needs it",
            )
    return None


def render_hccl(
    spec: ClusterSpec,
    *,
    version: str = DEFAULT_VERSION,
    scale_out: str = "",
    validated: bool = False,
) -> str:
    """The ``hccl.json`` text for ``spec`` in layout ``version`` (one of :data:`VERSIONS`).

    Deterministic, like :func:`~ranktable.clusterspec.spec_to_json`. Raises
    :class:`SpecError` if the spec is invalid, or if it is completed while a
    member lacks devices or a server id (such a table would be silently
    wrong), and :class:`ValueError` for an unknown version. ``validated``:
    the caller has just rendered the same spec with ``spec_to_json`` (which
    validates it), so the full check is not repeated; the table's own checks
    still run. ``scale_out``: the job's canonical ``scaleout-type`` (table 2.0).
    """
    if not validated:
        validate_spec(spec)
    if version == "v2":
        table = hccl_v2.render(spec)
    elif version == "v1":
        table = hccl_v1.render(spec)
    elif version in (hccl_table10.VERSION_1_0, hccl_table10.VERSION_1_2):
        table = hccl_table10.render(spec, version=version)
    elif version == hccl_table20.VERSION_2_0:
        table = hccl_table20.render(spec, scale_out=scale_out)
    else:
        raise ValueError(f"unknown rank table version {version!r}; expected one of {', '.join(VERSIONS)}")
    return json.dumps(
        table, separators=(",", ":"), ensure_ascii=False, check_circular=False
    )  # a tree: no cycle to find


def read_hccl(text: str) -> dict[str, Any]:
    """Parse and validate an ``hccl.json`` text of any layout; return the JSON object.

    Also accepts the placeholder ``{"status": "initializing"}``. Raises
    :class:`SpecError` naming what is wrong. A completed table must be
    consistent: counts match the lists and rank ids are exactly ``0..N-1``.
    """
    try:
        raw = load_json(text)
    except (ValueError, RecursionError) as err:  # also numbers over the digit limit, nesting too deep
        raise SpecError(f"hccl.json: not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise SpecError("hccl.json: expected a JSON object")
    status = raw.get("status")
    if status not in STATUSES:
        raise SpecError(f"hccl.json status: {status!r} is not one of {', '.join(STATUSES)}")
    version = hccl_version(raw)
    if version == hccl_table20.VERSION_2_0:
        hccl_table20.validate(raw)
    elif version == "v1":
        hccl_v1.validate(raw)
    elif version is not None:
        hccl_table10.validate(raw)
    elif status != STATUS_INITIALIZING:
        raise SpecError("hccl.json: a completed table needs server_list, rank_list or group_list")
    return raw


def hccl_version(table: dict[str, Any]) -> str | None:
    """The table's own version (``"1.0"``, ``"1.2"``, ``"2.0"``), ``"v1"``, or None (placeholder).

    HCCL-Controller's v2 and ascend-operator's 1.0 are both ``"1.0"``.
    """
    if "rank_list" in table or table.get("version") == hccl_table20.VERSION_2_0:
        return hccl_table20.VERSION_2_0
    if "server_list" in table or "version" in table:
        version = table.get("version")
        return version if isinstance(version, str) and version else hccl_table10.VERSION_1_0
    if "group_list" in table or "group_count" in table:
        return "v1"
    return None
