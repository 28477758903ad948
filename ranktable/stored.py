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
one resolution of the kubelet's ``..data`` link (see :mod:`ranktable.wait`).
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
import gzip
import os
import tempfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ranktable.clusterspec import CLUSTER_FILE, HCCL_FILE, SpecError

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


@dataclass(frozen=True)
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

    ``directory`` None: a new private temporary file (it outlives the exec of
    the training command). Else ``directory/hccl.json`` and
    ``directory/version`` (the epoch), each replaced atomically (a temporary
    file renamed over it), so readers polling the directory, as on
    ascend-operator's shared storage, never see half a file. A directory
    holding a ``version`` above ``epoch`` keeps its table (a member of an
    older epoch starting late must not roll the shared file back).
    """
    if directory is None:
        fd, path = tempfile.mkstemp(prefix="ring-hccl-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, HCCL_FILE)
    current = _read_bytes(os.path.join(directory, VERSION_FILE))
    if current is not None and current.strip().isdigit() and int(current.strip()) > epoch and os.path.exists(path):
        return path
    _replace(path, text.encode("utf-8"))
    _replace(os.path.join(directory, VERSION_FILE), str(epoch).encode("ascii"))
    return path


def _replace(path: str, content: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
