"""How the spec's files sit in the ConfigMap: plain keys, or gzip in ``binaryData``.

A job's files are ``cluster.json`` and, for NPU jobs, ``hccl.json``. The API
server allows one ConfigMap 1 MiB of values (``data`` and ``binaryData``
together, counted after base64 decoding), and a rank table of 16,384 NPUs is
several MiB. So there are two *forms*, and every ConfigMap version holds
exactly one of them:

* **plain**: ``data`` holds ``cluster.json`` (and ``hccl.json``) as text,
  byte for byte as before this module existed, whenever they fit. Containers
  of the HCCL-Controller era that poll ``hccl.json`` on the mount keep working.
* **compressed**: when the plain files would not fit, ``binaryData`` holds
  ``cluster.json.gz`` (and ``hccl.json.gz``), each the gzip of the plain text
  (no file name, mtime 0, so equal files give equal bytes), and ``data``
  holds no spec file. JSON rank tables repeat their keys for every device and
  compress 10-30 times.

Atomic per epoch: both files of an epoch travel in one ConfigMap write (a
``PUT`` of the whole object), whatever the form, and a reader takes both from
one version: the API returns one object, and a mounted volume is read through
one resolution of the kubelet's ``..data`` link (see :mod:`ranktable.launch.wait`).
The form is decided per version (all files plain, or all compressed), so a
reader never combines a plain file of one epoch with a compressed one of
another: when ``cluster.json.gz`` is present the plain keys are ignored.

Readers: :func:`files_from_configmap` (a ConfigMap object from the API),
:func:`read_files` (a mounted directory, where ``binaryData`` keys are files
of raw bytes) and :func:`unpack` (both come down to it). The writer is
:func:`pack`. Standard library only (``gzip``, ``base64``), Python 3.9 syntax:
the one-file launcher carries this module.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import zlib
from collections.abc import Callable, Mapping

from ranktable.clusterspec import CLUSTER_FILE, HCCL_FILE, SpecError
from ranktable.records import record

#: The spec's files, in the order they are written and read.
SPEC_FILES = (CLUSTER_FILE, HCCL_FILE)
#: Suffix of a file's compressed key in ``binaryData``.
GZIP_SUFFIX = ".gz"
#: The compressed keys (``cluster.json.gz``, ``hccl.json.gz``).
GZIP_FILES = tuple(name + GZIP_SUFFIX for name in SPEC_FILES)
#: gzip level: 6 (zlib's default) costs about twice level 1's CPU for 25-40 %
#: fewer bytes on rank tables, and the bytes decide which jobs fit.
GZIP_LEVEL = 6
#: Largest text a compressed key may expand to (a guard against a gzip bomb in
#: a reader; 64 MiB is about six times a 16,384-NPU table 2.0).
MAX_TEXT_BYTES = 64 * 1024 * 1024


class TooLarge(ValueError):
    """The files do not fit the limit even compressed; the sizes are in the message."""

    def __init__(self, *, plain: int, stored: int, limit: int) -> None:
        super().__init__(
            f"{plain} bytes plain, {stored} bytes gzip-compressed, over the ConfigMap limit of {limit} bytes"
        )
        self.plain = plain
        self.stored = stored
        self.limit = limit


@record
class Stored:
    """The ConfigMap payload of one set of files: its ``data`` and ``binaryData``
    (raw bytes; base64 only on the wire), the plain size and the size stored.
    ``compressed`` is True for the compressed form."""

    data: dict[str, str]
    binary_data: dict[str, bytes]
    plain_bytes: int
    stored_bytes: int

    @property
    def compressed(self) -> bool:
        return bool(self.binary_data)


def compress(text: str) -> bytes:
    """The gzip of ``text`` (UTF-8), deterministic: equal texts give equal bytes."""
    import gzip  # the writer's (the controller's); a launcher only reads, with zlib

    return gzip.compress(text.encode("utf-8"), compresslevel=GZIP_LEVEL, mtime=0)


def plain_size(files: Mapping[str, str]) -> int:
    """Bytes the API server counts for ``files`` in ``data`` (UTF-8 lengths)."""
    return sum(len(text.encode("utf-8")) for text in files.values())


def pack(files: Mapping[str, str], *, limit: int) -> Stored:
    """The form ``files`` go into a ConfigMap in: plain when they fit ``limit``, else compressed.

    Raises :class:`TooLarge` when even the compressed form exceeds ``limit``.
    Plain files are passed through untouched, so whatever fits is written
    byte for byte as before.
    """
    plain = plain_size(files)
    if plain <= limit:
        return Stored(data=dict(files), binary_data={}, plain_bytes=plain, stored_bytes=plain)
    binary = {name + GZIP_SUFFIX: compress(text) for name, text in files.items()}
    stored = sum(len(b) for b in binary.values())
    if stored > limit:
        raise TooLarge(plain=plain, stored=stored, limit=limit)
    return Stored(data={}, binary_data=binary, plain_bytes=plain, stored_bytes=stored)


def decompress(blob: bytes, *, name: str) -> str:
    """The text of compressed key ``name``; :class:`SpecError` when it is not gzip of UTF-8 text."""
    stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing, checked with its CRC
    try:
        raw = stream.decompress(blob, MAX_TEXT_BYTES + 1)
    except zlib.error as err:
        raise SpecError(f"{name}: not gzip data: {err}") from None
    if len(raw) > MAX_TEXT_BYTES:
        raise SpecError(f"{name}: expands to more than {MAX_TEXT_BYTES} bytes")
    if not stream.eof:
        raise SpecError(f"{name}: truncated gzip data")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{name}: not UTF-8 text: {err}") from None


def unpack(data: Mapping[str, str], binary: Mapping[str, bytes]) -> dict[str, str]:
    """The spec files (name -> text) of one ConfigMap version, whichever form it holds.

    The compressed form wins when ``cluster.json.gz`` is present (its plain
    keys, if any, are not read); absent files are absent from the result.
    Raises :class:`SpecError` for a compressed key that does not decompress.
    """
    if CLUSTER_FILE + GZIP_SUFFIX in binary:
        return {
            name: decompress(binary[name + GZIP_SUFFIX], name=name + GZIP_SUFFIX)
            for name in SPEC_FILES
            if name + GZIP_SUFFIX in binary
        }
    return {name: data[name] for name in SPEC_FILES if name in data}


def binary_from_json(raw: Mapping[str, object] | None) -> dict[str, bytes]:
    """A ConfigMap's ``binaryData`` as the API's JSON carries it (base64), decoded.

    Raises :class:`SpecError` for a value that is not base64.
    """
    found: dict[str, bytes] = {}
    for key, value in (raw or {}).items():
        if not isinstance(value, str):
            raise SpecError(f"binaryData.{key}: expected base64 text")
        try:
            found[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as err:
            raise SpecError(f"binaryData.{key}: not base64: {err}") from None
    return found


def files_from_configmap(configmap: Mapping[str, object] | None) -> dict[str, str]:
    """The spec files of a ConfigMap object (raw JSON from the API), either form; {} for None."""
    if not configmap:
        return {}
    data = configmap.get("data") or {}
    binary = configmap.get("binaryData") or {}
    if not isinstance(data, dict) or not isinstance(binary, dict):
        raise SpecError("ConfigMap data/binaryData: expected objects")
    spec_binary = {k: v for k, v in binary.items() if k in GZIP_FILES}
    return unpack({k: v for k, v in data.items() if isinstance(v, str)}, binary_from_json(spec_binary))


def read_files(directory: str) -> dict[str, str]:
    """The spec files in ``directory`` (a mounted ConfigMap version, or any directory), either form.

    The caller picks the directory (one resolution of ``..data``); this reads
    the compressed keys when ``cluster.json.gz`` is there, else the plain
    ones. Files absent (or vanishing while read) are absent from the result.
    """
    compressed = _read_bytes(os.path.join(directory, CLUSTER_FILE + GZIP_SUFFIX))
    if compressed is not None:
        binary = {CLUSTER_FILE + GZIP_SUFFIX: compressed}
        table = _read_bytes(os.path.join(directory, HCCL_FILE + GZIP_SUFFIX))
        if table is not None:
            binary[HCCL_FILE + GZIP_SUFFIX] = table
        return unpack({}, binary)
    found: dict[str, str] = {}
    for name in SPEC_FILES:
        raw = _read_bytes(os.path.join(directory, name))
        if raw is not None:
            found[name] = raw.decode("utf-8", errors="replace")
    return found


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


#: Environment variable naming a directory where the launcher writes ``hccl.json``
#: (and ``version``) the way ascend-operator writes its shared-storage table.
RANK_TABLE_DIR_ENV = "RING_RANK_TABLE_DIR"
#: The file beside ``hccl.json`` holding the table's version (ascend-operator: a
#: timestamp that grows with every update; here the spec's epoch, which also grows).
VERSION_FILE = "version"


def rank_table_file(hccl: str, *, epoch: int, default: Callable[[str], str]) -> str:
    """The path ``RANK_TABLE_FILE`` names for the table ``hccl`` of a spec at ``epoch``.

    With ``$RING_RANK_TABLE_DIR`` set, the table is written there (see
    :func:`write_rank_table`; ascend-operator's shared-storage layout); else
    ``default(hccl)``, the source's own choice (the mounted ``hccl.json`` of
    the plain form, or a local copy).
    """
    directory = os.environ.get(RANK_TABLE_DIR_ENV)
    if directory:
        return write_rank_table(hccl, directory=directory, epoch=epoch)
    return default(hccl)


def write_rank_table(text: str, *, directory: str | None = None, epoch: int = 0) -> str:
    """Write rank table ``text`` to a local file and return the path ``RANK_TABLE_FILE`` names.

    ``directory`` None: this process's local copy (:func:`write_local_rank_table`:
    one file per table in a private per-user directory, removed once no
    running process uses it). Else ``directory/hccl.json`` and
    ``directory/version`` (the epoch), each replaced atomically (a temporary
    file renamed over it), so readers polling the directory, as on
    ascend-operator's shared storage, never see half a file. A directory
    holding a ``version`` above ``epoch`` keeps its table (a member of an
    older epoch starting late must not roll the shared file back).
    Raises OSError when the file cannot be written (a read-only root without
    a writable ``$TMPDIR``); the launcher then warns and leaves
    ``RANK_TABLE_FILE`` unset.
    """
    if directory is None:
        return write_local_rank_table(text)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, HCCL_FILE)
    current = _read_bytes(os.path.join(directory, VERSION_FILE))
    if current is not None and current.strip().isdigit() and int(current.strip()) > epoch and os.path.exists(path):
        return path
    replace_file(path, text.encode("utf-8"))
    replace_file(os.path.join(directory, VERSION_FILE), str(epoch).encode("ascii"))
    return path


#: The private directory of local rank table copies, in ``$TMPDIR``: this prefix and the user id.
LOCAL_DIR_PREFIX = "ring-hccl-"
#: The directory's lock file: held exclusively while a table is written and old ones removed.
_GUARD_FILE = ".lock"
#: Descriptors of the local tables this process named (see :func:`write_local_rank_table`);
#: each holds a shared lock that marks its file as in use.
_held: list[int] = []


def write_local_rank_table(text: str, *, base: str | None = None) -> str:
    """Write ``text`` as ``BASE/ring-hccl-<uid>/hccl-<hash>.json`` and return that path (``BASE``: ``$TMPDIR``).

    Used where ``RANK_TABLE_FILE`` has no file to name (the compressed form,
    API mode). The copies stay bounded however often the launcher starts
    (the kubelet restarting the container, ``--supervise`` restarting the
    trainer on every new epoch). The rule:

    * **One file per table.** The name is a hash of the content, so a start
      with the table of an earlier start (the same epoch) finds its file
      there and reuses it; a new table gets a new file.
    * **In use means locked.** The launcher holds a shared ``flock`` on the
      file it names, through a descriptor that is inherited across the exec
      of the training command, so the lock lasts as long as the trainer
      (and any child that keeps the descriptor) runs. ``--supervise`` holds
      it in the supervisor: writing the table of its next start releases
      this process's earlier ones, which is safe because the supervisor
      starts the next trainer only after the previous one has exited.
    * **Unused files go.** After its file is in place, a writer removes
      every other file of the directory that it can lock exclusively
      without waiting: nobody holds it, so no running launcher, supervisor
      or trainer names it (a container restarted in place left its old
      files unlocked: its processes are gone). This also clears temporary
      files of a writer that was killed.
    * Writers take the directory's ``.lock`` exclusively for the write and
      the removal, so two launchers sharing a ``/tmp`` never interleave, and
      a file renamed into place cannot be removed before it is locked.

    The one gap: ``--print`` hands the path to its caller and exits, so no
    lock protects that file; it lasts until the next start with another
    table in the same directory (normally the next container start, when
    that caller is gone). A trainer that closes inherited descriptors
    likewise loses its claim, which only matters where containers share
    ``/tmp``. The directory is 0700 and the files 0600; a directory there
    that is not this user's, or not a directory, is refused. Content is
    replaced atomically (a temporary file renamed into place): readers
    never see half a file. Raises OSError when nothing can be written.
    """
    import fcntl  # Unix only: imported here so that readers of this module elsewhere do not need it
    import hashlib

    directory = _private_directory(base if base is not None else temp_dir())
    content = text.encode("utf-8")
    name = "hccl-" + hashlib.sha256(content).hexdigest()[:16] + ".json"
    path = os.path.join(directory, name)
    guard = os.open(os.path.join(directory, _GUARD_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not _whole(path, len(content)):
            replace_file(path, content, mode=0o600)
        held = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        fcntl.flock(held, fcntl.LOCK_SH)
        os.set_inheritable(held, True)
        while _held:  # this process has moved on from the tables it named before
            os.close(_held.pop())
        _held.append(held)
        _remove_unused(directory, keep=name)
    finally:
        os.close(guard)
    return path


def _private_directory(base: str) -> str:
    """``base/ring-hccl-<uid>``, created 0700; OSError when it exists but is not this user's directory."""
    uid = os.getuid()
    directory = os.path.join(base, f"{LOCAL_DIR_PREFIX}{uid}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    found = os.lstat(directory)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid:
        raise PermissionError(f"{directory} is not a directory of user {uid}: no private place for the rank table")
    if stat.S_IMODE(found.st_mode) & 0o077:
        os.chmod(directory, 0o700)
    return directory


def _whole(path: str, size: int) -> bool:
    """Is ``path`` a regular file of ``size`` bytes (a copy of this table written earlier)?"""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size == size


def _remove_unused(directory: str, *, keep: str) -> None:
    """Remove the entries of ``directory`` but ``keep`` and the guard that nobody holds a lock on.

    The caller holds the directory's guard (see :func:`write_local_rank_table`).
    """
    import fcntl

    for name in os.listdir(directory):
        if name in (keep, _GUARD_FILE):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
        except OSError:  # held: some running process names it (or it vanished meanwhile)
            pass
        finally:
            os.close(fd)


def temp_dir() -> str:
    """Where temporary files go: ``tempfile.gettempdir()``'s candidates, in its order, without importing it.

    ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp``,
    the working directory: the first that is a directory this process may
    write to and enter (``tempfile``'s cost to a launcher start:
    docs/launcher.md#what-a-start-costs). Raises FileNotFoundError when there is none, as ``tempfile`` does.
    """
    candidates = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]
    try:
        candidates.append(os.getcwd())
    except OSError:
        pass
    for candidate in candidates:
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return os.path.abspath(candidate)
    raise FileNotFoundError("no usable temporary directory: $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp")


def replace_file(path: str, content: bytes, *, mode: int = 0o644) -> None:
    """Write ``content`` to ``path`` atomically: a new file beside it (``mode``), renamed into place."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
