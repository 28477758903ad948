"""``TF_CONFIG`` from a completed cluster spec, and the Python drop-in.

TensorFlow reads ``TF_CONFIG`` (``{"cluster": {job: [host:port, ...]},
"task": {"type": job, "index": i}}``) once, when a distribution strategy or
cluster resolver is created; it must hold every peer's address before that.
We derive it from the spec, never from DNS:

* Each member's role is :func:`~ranktable.clusterspec.role_for_task` of its
  task (``chief``, ``worker``, ``ps``, ``evaluator`` keep their name, any
  other task name becomes ``worker``). Each role's list holds ``ip:port`` of
  its members in rank order, so several tasks mapped to ``worker`` share one
  list, and a pod's ``index`` is its position in its role's list.
* ``chief`` stays its own job next to ``worker``, as TensorFlow expects:
  MultiWorkerMirroredStrategy trains on the chief too
  (``multi_worker_util.worker_count`` = chiefs + workers) and lets it lead;
  without a chief, ``worker`` 0 leads. ``ps`` members form the ``ps`` job
  (ParameterServerStrategy).
* TensorFlow allows at most one ``chief`` task and at most one ``evaluator``
  task (``multi_worker_util._validate_cluster_spec``); a spec with more is
  rejected here with a clear :class:`SpecError` rather than by TensorFlow
  later.
* The evaluator is split off, as TensorFlow's distribute coordinator does
  (``_split_cluster_for_evaluator``): the evaluator sees a cluster holding only
  the ``evaluator`` job, every other task sees the cluster without it. The
  evaluator takes no part in training collectives, and leaving it out keeps
  the training tasks from waiting for or placing ops on it.

:func:`setup_tf_config` is the drop-in for scripts that called the seed
runtime's DNS-probing ``setup_tf_config()`` before ``import tensorflow``: it
waits for the spec with the launcher's own waiting code
(:mod:`ranktable.launch.wait`) and sets ``TF_CONFIG``. It never imports TensorFlow.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from ranktable.clusterspec import KNOWN_ROLES, SINGLETON_ROLES, ClusterSpec, SpecError, member_for_pod

if TYPE_CHECKING:
    from typing import Any, Final


#: Set by ``ring-launch`` when ``TF_CONFIG`` did not fit the exec limit: the file holding its value
#: (:func:`ranktable.exports.file_variable` of ``TF_CONFIG``).
TF_CONFIG_FILE_ENV: Final = "RING_TF_CONFIG_FILE"


def tf_config(spec: ClusterSpec, *, pod: str) -> dict[str, Any]:
    """The ``TF_CONFIG`` object for member ``pod`` of a completed ``spec``.

    Raises :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not a
    member, :class:`SpecError` if the spec is not completed or breaks
    TensorFlow's rules (more than one chief or evaluator).
    """
    if not spec.completed:
        raise SpecError(f"the spec is {spec.status}, not completed: TF_CONFIG cannot be derived yet")
    member = member_for_pod(spec, pod)
    cluster: dict[str, list[str]] = {}
    for m in spec.members:
        cluster.setdefault(m.role, []).append(m.address)
    for role in SINGLETON_ROLES:
        if len(cluster.get(role, ())) > 1:
            holders = ", ".join(m.pod for m in spec.members if m.role == role)
            raise SpecError(
                f"TensorFlow allows at most one {role!r} task, the spec has {len(cluster[role])}: {holders}"
            )
    index = [m.pod for m in spec.members if m.role == member.role].index(pod)
    if member.role == "evaluator":
        visible = {"evaluator": cluster["evaluator"]}
    else:
        visible = {role: addrs for role, addrs in cluster.items() if role != "evaluator"}
    ordered: dict[str, list[str]] = {role: visible[role] for role in KNOWN_ROLES if role in visible}
    ordered.update({role: addrs for role, addrs in sorted(visible.items()) if role not in ordered})
    return {"cluster": ordered, "task": {"type": member.role, "index": index}}


def setup_tf_config(
    *,
    config_dir: str | None = None,
    timeout: float | None = None,
    pod: str | None = None,
) -> dict[str, Any]:
    """Wait for the completed spec holding this pod, set ``os.environ["TF_CONFIG"]``, return it.

    Call it before ``import tensorflow``. Under ``ring-launch``, when
    ``TF_CONFIG`` was over the exec limit and the launcher put it in the file
    ``$RING_TF_CONFIG_FILE`` names (:data:`ranktable.exports.FILE_FORMS`), it
    is taken from that file and nothing is waited for. ``config_dir`` defaults to
    ``$RING_CONFIG_DIR`` or ``/etc/ring-config``; ``timeout`` (seconds) to
    ``$RING_TIMEOUT`` or 600; ``pod`` to ``$POD_NAME``, then ``$HOSTNAME``.
    ``$POD_UID``/``$POD_IP``, when set, must match the member (a spec written
    for an earlier pod of the same name is waited out). Progress goes to
    stderr. Raises :class:`~ranktable.launch.wait.WaitTimeout` on timeout,
    :class:`~ranktable.clusterspec.PodNotInSpec` if the completed spec never
    listed this pod, :class:`SpecError` for a malformed spec.
    """
    from ranktable.launch import wait

    exported = os.environ.get(TF_CONFIG_FILE_ENV)
    if exported:
        with open(exported, encoding="utf-8") as handle:
            text = handle.read()
        config: dict[str, Any] = json.loads(text)
        os.environ["TF_CONFIG"] = text
        task = config.get("task", {})
        _log(f"TF_CONFIG from {exported}: {len(text):,} bytes, task {task.get('type')} {task.get('index')}")
        return config
    source = wait.FileSource(config_dir or wait.default_config_dir())
    identity = wait.identity_from_env(pod)
    ready = wait.wait_for_spec(
        source, identity, timeout=wait.default_timeout() if timeout is None else timeout, progress=_log
    )
    config = tf_config(ready.spec, pod=identity.pod)
    os.environ["TF_CONFIG"] = json.dumps(config, separators=(",", ":"))
    _log(f"TF_CONFIG={os.environ['TF_CONFIG']}")
    return config


def _log(message: str) -> None:
    print(f"setup_tf_config: {message}", file=sys.stderr, flush=True)
