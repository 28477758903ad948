"""Waiting for the completed spec that holds this pod: the launcher's core.

Both :mod:`ranktable.launch.launcher` and :func:`ranktable.tfconfig.setup_tf_config`
wait here. A *source* yields :class:`Observation` s (the current
``cluster.json`` and ``hccl.json`` texts) whenever they may have changed;
:func:`wait_for_spec` judges each one and returns as soon as the spec is
``completed`` and lists this pod, or raises at the deadline. Two sources:

* :class:`FileSource` watches the mounted ConfigMap directory. The kubelet
  updates such a volume atomically: the files live in a hidden timestamped
  directory (``..2026_01_31_12_00_00.123456789``), a symlink ``..data`` points
  at the current one, and ``cluster.json`` is itself a symlink to
  ``..data/cluster.json``. An update writes a new timestamped directory,
  renames a fresh symlink over ``..data`` (one atomic step) and deletes the old
  directory. So one ``open`` always sees a whole file; what can race is a read
  of the *old* directory while it is being deleted (``ENOENT``), and reading
  ``cluster.json`` and ``hccl.json`` from two different versions. The reader
  therefore resolves ``..data`` once, reads both files from that directory,
  and checks that ``..data`` still points there afterwards, retrying if not.
  Directories not managed by the kubelet (no ``..data``) are read directly;
  a writer there may be caught mid-write, so malformed text is retried and
  only text that stays malformed for several reads is an error.
  Noticing a change is quick and cheap: the source sleeps on an inotify
  watch of the directory (Linux, through ``ctypes``: the kubelet's rename
  of ``..data`` wakes it at once, and waiting costs no CPU), and where
  inotify is unavailable it checks every 20 ms (:data:`CHECK_INTERVAL`) a
  signature of the directory (``readlink ..data`` and a ``stat`` of each
  file, no reads). Either way the files are read and judged only when the
  signature changed, or every ``--poll-interval`` as a safety net.
* :class:`ranktable.launch.apiwatch.ApiSource` (``--from-api``) lists and watches
  the ConfigMap through the API server, avoiding the kubelet's volume sync
  delay; its texts are what the API server holds, so malformed text there is
  an error at once.

Both turn what they hold into texts through one module,
:mod:`ranktable.stored`, which knows the two forms a spec is stored in
(plain keys, or gzip in ``binaryData``): :func:`ranktable.stored.read_files`
for a directory, :func:`ranktable.stored.files_from_configmap` for an object.

Identity. A pod is found by name. Replacement pods often keep their name
(Volcano, JobSet), so a ``completed`` spec written for the pod's predecessor
would carry the wrong uid and IP; when ``POD_UID`` / ``POD_IP`` are set (from
the downward API) the member must match them, else the spec is stale and the
wait goes on.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ranktable.clusterspec import (
    CLUSTER_FILE,
    HCCL_FILE,
    STATUS_COMPLETED,
    ClusterSpec,
    Member,
    PodNotInSpec,
    SpecError,
    spec_from_json,
)
from ranktable.frozen import record
from ranktable.launch.launchopts import DEFAULT_POLL_INTERVAL as DEFAULT_POLL_INTERVAL
from ranktable.launch.launchopts import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ranktable.launch.launchopts import default_timeout as default_timeout
from ranktable.podenv import POD_IP_ENV, POD_UID_ENV, pod_name
from ranktable.stored import files_from_configmap, read_files, write_rank_table

if TYPE_CHECKING:
    from typing import Any, Final, Protocol
else:
    Protocol = object  # Source is a protocol to type checkers only

DEFAULT_CONFIG_DIR: Final = "/etc/ring-config"
#: Seconds between two checks of the file mode's directory signature.
CHECK_INTERVAL: Final = 0.02
#: Identical malformed reads in a row (file mode) before giving up.
MALFORMED_READS: Final = 3
#: Seconds between "still waiting" lines when nothing changes.
HEARTBEAT: Final = 15.0
#: Minimum seconds between two progress lines.
MIN_PROGRESS_GAP: Final = 1.0

DATA_LINK: Final = "..data"

Log = Callable[[str], None]


def quiet(message: str) -> None:
    """A :data:`Log` that drops every line."""
    del message


def default_config_dir() -> str:
    """``$RING_CONFIG_DIR``, else ``/etc/ring-config``."""
    return os.environ.get("RING_CONFIG_DIR") or DEFAULT_CONFIG_DIR


class WaitTimeout(TimeoutError):
    """The deadline passed before the spec was ready; the message says what was seen last."""

    def __init__(self, message: str, *, last: str) -> None:
        super().__init__(message)
        self.last = last


@record
class Identity:
    """Who this pod is. ``uid``/``ip`` are empty when unknown (then not checked)."""

    pod: str
    uid: str = ""
    ip: str = ""


def identity_from_env(pod: str | None = None) -> Identity:
    """``pod``, else ``$POD_NAME``, else ``$HOSTNAME``, else the host name; plus ``$POD_UID``, ``$POD_IP``."""
    return Identity(pod=pod_name(pod), uid=os.environ.get(POD_UID_ENV, ""), ip=os.environ.get(POD_IP_ENV, ""))


@record
class Observation:
    """One look at the source.

    ``cluster``/``hccl`` are the texts, None when absent (either form of
    :mod:`ranktable.stored`, decompressed). ``final`` is True when the text is
    certainly what the writer wrote (API), False when a read may have caught a
    non-atomic writer mid-write (files). ``error``: the files could not be
    decoded (a compressed key that is not gzip), judged like malformed text.
    """

    cluster: str | None
    hccl: str | None
    final: bool
    error: str | None = None


def observation_from_configmap(configmap: dict[str, Any] | None) -> Observation:
    """The texts of a ConfigMap object from the API (None: it does not exist), either form of :mod:`ranktable.stored`."""
    if configmap is None:
        return Observation(cluster=None, hccl=None, final=True)
    try:
        files = files_from_configmap(configmap)
    except SpecError as err:
        return Observation(cluster=None, hccl=None, final=True, error=f"ConfigMap: {err}")
    return Observation(cluster=files.get(CLUSTER_FILE), hccl=files.get(HCCL_FILE), final=True)


class Source(Protocol):
    """Where the spec comes from.

    ``where`` names it for messages. ``observe`` yields an observation at
    least once, then whenever the content may have changed, and returns once
    ``deadline`` (a ``time.monotonic()`` value) has passed; it must not block
    much past the deadline. ``rank_table_path`` gives the path
    ``RANK_TABLE_FILE`` should name for a ready ``hccl`` text.
    """

    where: str

    def observe(self, deadline: float) -> Iterator[Observation]: ...

    def rank_table_path(self, hccl: str) -> str: ...


@record
class Ready:
    """A completed spec holding this pod (``member``); ``hccl`` its rank table text, if any."""

    spec: ClusterSpec
    member: Member
    hccl: str | None


class FileSource:
    """Watches ``DIR/cluster.json`` (and ``DIR/hccl.json``): a signature check every 20 ms, reads on change.

    ``interval`` is the longest time between two reads when nothing seems
    to change (a safety net for writers that keep size and mtime).
    """

    def __init__(self, config_dir: str, *, interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self.config_dir = config_dir
        self.interval = interval
        self.where = os.path.join(config_dir, CLUSTER_FILE)

    def observe(self, deadline: float) -> Iterator[Observation]:
        seen: tuple[object, ...] | None = None
        read_at = float("-inf")
        notify: _DirectoryWatch | None = None
        watched: tuple[int, int, int] | None = None
        try:
            while True:
                directory = _stat(self.config_dir)
                if directory != watched:  # the directory appeared or was replaced: watch the one there now
                    if notify is not None:
                        notify.close()
                    notify = _DirectoryWatch.open(self.config_dir) if directory is not None else None
                    watched = directory
                signature = self.signature()
                if signature != seen or time.monotonic() - read_at >= self.interval:
                    seen, read_at = signature, time.monotonic()
                    yield self.read()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                if notify is not None:
                    notify.wait(min(self.interval, remaining))
                else:
                    time.sleep(min(CHECK_INTERVAL, self.interval, remaining))
        finally:
            if notify is not None:
                notify.close()

    def signature(self) -> tuple[object, ...]:
        """What changes when the directory's spec may have: the ``..data`` target and each file's stat."""
        return (
            self._data_target(),
            _stat(os.path.join(self.config_dir, CLUSTER_FILE)),
            _stat(os.path.join(self.config_dir, HCCL_FILE)),
        )

    def read(self) -> Observation:
        """Both files from one version of the directory (see the module docstring)."""
        files: dict[str, str] = {}
        error: str | None = None
        for _ in range(20):
            before = self._data_target()
            base = os.path.join(self.config_dir, before) if before else self.config_dir
            try:
                files, error = read_files(base), None  # plain or compressed (ranktable.stored)
            except SpecError as err:
                files, error = {}, str(err)
            if self._data_target() == before:
                break
        return Observation(cluster=files.get(CLUSTER_FILE), hccl=files.get(HCCL_FILE), final=False, error=error)

    def rank_table_path(self, hccl: str) -> str:
        # The plain form's stable path: it follows ..data, so it always names the
        # current table. The compressed form has no hccl.json to name: a local copy.
        if os.path.exists(os.path.join(self.config_dir, HCCL_FILE)):
            return os.path.join(self.config_dir, HCCL_FILE)
        return write_rank_table(hccl)

    def _data_target(self) -> str | None:
        try:
            return os.readlink(os.path.join(self.config_dir, DATA_LINK))
        except OSError:  # absent, or not a symlink: not a kubelet-managed directory
            return None


class _DirectoryWatch:
    """An inotify watch on one directory's entries (Linux, through ``ctypes``): :meth:`wait` sleeps until a change.

    :meth:`open` returns None where inotify is unavailable (not Linux, no
    ``ctypes``, the per-user watch limit reached); the caller then polls.
    """

    #: IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF
    MASK = 0x002 | 0x004 | 0x008 | 0x040 | 0x080 | 0x100 | 0x200 | 0x400 | 0x800

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, directory: str) -> _DirectoryWatch | None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        except (ImportError, OSError, AttributeError):
            return None
        if fd < 0:
            return None
        if int(libc.inotify_add_watch(fd, os.fsencode(directory), cls.MASK)) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout: float) -> None:
        """Return after a change in the directory (events drained), or after ``timeout`` seconds."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        while ready:
            try:
                os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                break

    def close(self) -> None:
        os.close(self.fd)


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class Judge:
    """Turns observations into a verdict; keeps what it needs across them.

    One judge per stream of observations (it counts malformed reads in a
    row); :func:`wait_for_spec` and the supervisor (:mod:`ranktable.launch.supervise`)
    use it.
    """

    def __init__(self, identity: Identity, where: str) -> None:
        self.identity = identity
        self.where = where
        self.bad_text: tuple[str | None, str | None] | None = None
        self.bad_reads = 0
        self.not_in: PodNotInSpec | None = None
        #: The spec of the last observation, None when absent or malformed.
        self.spec: ClusterSpec | None = None
        #: The last texts parsed well and what they gave: (cluster, hccl, spec, table). A
        #: supervisor polls the same files for the whole run, and parsing a 16,384-NPU
        #: spec costs about 0.1 s of CPU, twice a second: equal texts are not parsed again.
        self.parsed: tuple[str, str | None, ClusterSpec, dict[str, Any] | None] | None = None

    def judge(self, obs: Observation) -> Ready | str:
        """A :class:`Ready`, or a one-line reason to keep waiting; raises :class:`SpecError` when malformed for good."""
        self.not_in = None
        self.spec = None
        if obs.error is not None:
            return self._bad(obs, SpecError(obs.error))
        if obs.cluster is None:
            self._good()
            return f"{self.where} does not exist yet"
        cached = self.parsed
        if cached is not None and cached[0] == obs.cluster and cached[1] == obs.hccl:
            spec, table = cached[2], cached[3]
        else:
            try:
                spec = spec_from_json(obs.cluster)
                table = _read_hccl(obs.hccl) if obs.hccl is not None and spec.completed and spec.has_devices else None
            except SpecError as err:
                return self._bad(obs, err)
            self.parsed = (obs.cluster, obs.hccl, spec, table)
        self._good()
        self.spec = spec
        if spec.status != STATUS_COMPLETED:
            return f"spec {spec.status}: epoch {spec.epoch}, members {len(spec.members)}/{spec.expected}"
        pods = tuple(m.pod for m in spec.members)
        member = next((m for m in spec.members if m.pod == self.identity.pod), None)
        if member is None:
            self.not_in = PodNotInSpec(self.identity.pod, pods, epoch=spec.epoch)
            return f"spec completed (epoch {spec.epoch}) but pod {self.identity.pod!r} is not among {', '.join(pods)}"
        if self.identity.uid and member.uid != self.identity.uid:
            return (
                f"spec completed (epoch {spec.epoch}) for an earlier pod {member.pod!r} "
                f"(uid {member.uid}, this pod is {self.identity.uid})"
            )
        if self.identity.ip and _comparable(member, self.identity.ip) and member.ip != self.identity.ip:
            return (
                f"spec completed (epoch {spec.epoch}) with ip {member.ip} for this pod, whose ip is {self.identity.ip}"
            )
        if table is not None and table.get("status") != STATUS_COMPLETED:
            return f"spec completed (epoch {spec.epoch}), {HCCL_FILE} still {table.get('status')}"
        return Ready(spec=spec, member=member, hccl=obs.hccl if table is not None else None)

    def _good(self) -> None:
        self.bad_text = None
        self.bad_reads = 0

    def _bad(self, obs: Observation, err: SpecError) -> str:
        message = f"malformed spec in {self.where}: {err}"
        if obs.final:
            raise SpecError(message)
        texts = (obs.cluster, obs.hccl) if obs.error is None else (obs.error, None)
        self.bad_reads = self.bad_reads + 1 if texts == self.bad_text else 1
        self.bad_text = texts
        if self.bad_reads >= MALFORMED_READS:
            raise SpecError(f"{message} (unchanged over {self.bad_reads} reads)")
        return f"{message} (retrying)"


def _comparable(member: Member, ip: str) -> bool:
    """Whether ``member.ip`` must equal this pod's ``$POD_IP`` (``ip``): on the pod network and of its family.

    A job may list members by their other family's address (dual-stack,
    ``ring-controller.io/ip-family``) or by their address on a secondary
    network (the member then has an interface); ``$POD_IP`` is neither, so
    it cannot tell a stale spec from a current one there (the pod uid still does).
    """
    return not member.interface and (":" in member.ip) == (":" in ip)


def wait_for_spec(
    source: Source,
    identity: Identity,
    *,
    timeout: float,
    progress: Log = quiet,
) -> Ready:
    """Block until ``source`` holds a completed spec listing ``identity``; return it.

    Progress lines go to ``progress``: each new state (at most one a second)
    and a "still waiting" line every 15 s. Raises
    :class:`~ranktable.clusterspec.PodNotInSpec` when the deadline passes while
    the latest spec was completed without this pod, :class:`WaitTimeout` when
    it passes otherwise, :class:`SpecError` for a malformed spec.
    """
    start = time.monotonic()
    deadline = start + timeout
    judge = Judge(identity=identity, where=source.where)
    reason = f"nothing read from {source.where} yet"
    printed: str | None = None
    printed_at = float("-inf")
    progress(f"pod {identity.pod}: waiting up to {timeout:g}s for a completed spec in {source.where}")
    for obs in source.observe(deadline):
        verdict = judge.judge(obs)
        now = time.monotonic()
        if isinstance(verdict, Ready):
            progress(f"SPEC_SEEN {time.time():.6f}")  # wall clock, for the benchmarks' stage timing
            spec = verdict.spec
            progress(
                f"spec completed: epoch {spec.epoch}, {len(spec.members)} members; "
                f"pod {identity.pod} is rank {verdict.member.rank} ({verdict.member.task} {verdict.member.index}) "
                f"after {now - start:.1f}s"
            )
            return verdict
        reason = verdict
        if reason != printed and now - printed_at >= MIN_PROGRESS_GAP:
            progress(f"waiting: {reason}")
            printed, printed_at = reason, now
        elif now - printed_at >= HEARTBEAT:
            progress(f"still waiting after {now - start:.0f}s: {reason}")
            printed_at = now
        if now >= deadline:
            break
    waited = time.monotonic() - start
    if judge.not_in is not None:
        err = judge.not_in
        raise PodNotInSpec(err.pod, err.pods, epoch=err.epoch, waited=waited)
    raise WaitTimeout(
        f"timed out after {waited:.0f}s waiting for a completed spec in {source.where}; last seen: {reason}",
        last=reason,
    )


def _read_hccl(text: str) -> dict[str, Any]:
    """:func:`ranktable.hccl.read_hccl`, its four format modules loaded only for a job with Ascend devices."""
    from ranktable.hccl import read_hccl

    return read_hccl(text)
