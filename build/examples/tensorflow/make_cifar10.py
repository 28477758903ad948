#!/usr/bin/env python3
"""Write small synthetic CIFAR-10 batches in the format of the real dataset.

CIFAR-10 cannot be downloaded on the machines this project is tested on, and
the example training program (``train.py``) reads the local pickle batches the
way the seed runtime's loader does. This generator writes files that any
reader of the real "CIFAR-10 python version" accepts unchanged:

* ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``: a pickled dict with
  the keys ``batch_label`` (``"training batch 1 of 5"``, ``"testing batch 1 of
  1"``), ``labels`` (list of ints 0..9), ``data`` (numpy ``uint8`` array of
  shape ``N x 3072``: each row one 32x32 image, the red plane then green then
  blue, each plane row-major) and ``filenames`` (list of names).
* ``batches.meta``: a pickled dict with ``num_cases_per_batch``,
  ``label_names`` (the ten class names) and ``num_vis`` (3072).

The real files were written by Python 2's cPickle, so their strings are
Python 2 ``str`` objects that Python 3 reads back as ``bytes`` with
``pickle.load(f, encoding="bytes")`` (hence the byte keys ``b"data"``...).
Python 3's pickler cannot produce that by itself: at protocol 2 it spells
``bytes`` as a call to ``_codecs.encode`` (which restricted unpicklers, such
as the one Keras uses for its datasets, refuse) and numpy 2 names its array
reconstructor ``numpy._core.multiarray``, which numpy 1.x cannot import. So
this module pickles with the pure-Python pickler at protocol 2 and overrides
exactly those two spellings: ``bytes`` become Python 2 ``BINSTRING`` opcodes
and the reconstructor is named ``numpy.core.multiarray._reconstruct`` like in
the real files (numpy 2 still resolves that name).

The images are not noise: every class has a fixed colour pattern and each
image is that pattern plus noise, so a small network's loss visibly falls
within a few steps. Output is a pure function of ``--seed`` and
``--per-batch``.
"""

from __future__ import annotations

import argparse
import io
import pickle
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

LABEL_NAMES: tuple[str, ...] = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
"""Class names of CIFAR-10, in label order (label 0 is "airplane")."""

TRAIN_BATCHES: tuple[str, ...] = tuple(f"data_batch_{i}" for i in range(1, 6))
"""File names of the five training batches."""

TEST_BATCH = "test_batch"
"""File name of the test batch."""

META_FILE = "batches.meta"
"""File name of the metadata dict."""

IMAGE_SIDE = 32
PIXELS_PER_IMAGE = IMAGE_SIDE * IMAGE_SIDE * 3  # 3072, the width of a data row

_RECONSTRUCT: Any = np.ndarray.__reduce_ex__(np.zeros(1, np.uint8), 2)[0]


# Only the pure-Python pickler can be customised per opcode (the files are
# small, so its speed does not matter); typeshed does not describe its
# internals, hence Any.
_PurePickler: Any = pickle._Pickler


class _Py2Pickler(_PurePickler):  # type: ignore[misc]
    """Protocol-2 pickler that writes ``bytes`` the way Python 2 wrote ``str``."""

    dispatch = dict(_PurePickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str

    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj is _RECONSTRUCT:
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


def dumps_py2(obj: object) -> bytes:
    """Pickle ``obj`` (dicts, lists, ints, bytes, numpy arrays) like cPickle did."""
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def _class_patterns(rng: np.random.Generator) -> NDArray[np.float64]:
    """One smooth 3x32x32 pattern per class: a colour plus a coarse texture."""
    coarse = rng.uniform(0.0, 255.0, size=(len(LABEL_NAMES), 3, 4, 4))
    # Upsample 4x4 -> 32x32 by repetition: blocky, distinct, cheap to learn.
    return np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)


def make_batch(
    *,
    rng: np.random.Generator,
    patterns: NDArray[np.float64],
    count: int,
    batch_label: str,
    first_serial: int,
) -> dict[bytes, object]:
    """Build one batch dict with byte keys, exactly as the real files hold it."""
    labels = rng.integers(0, len(LABEL_NAMES), size=count)
    noise = rng.normal(0.0, 40.0, size=(count, 3, IMAGE_SIDE, IMAGE_SIDE))
    images = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
    # (N, 3, 32, 32) in C order is exactly the R plane, G plane, B plane,
    # each row-major: the 3072-wide row layout of the real data.
    data = images.reshape(count, PIXELS_PER_IMAGE)
    filenames = [f"{LABEL_NAMES[int(label)]}_s_{first_serial + i:06d}.png".encode() for i, label in enumerate(labels)]
    return {
        b"batch_label": batch_label.encode(),
        b"labels": [int(label) for label in labels],
        b"data": data,
        b"filenames": filenames,
    }


def write_dataset(*, out: Path, per_batch: int, seed: int) -> list[Path]:
    """Write the six batches and ``batches.meta`` into ``out``; return the paths.

    ``out`` is created if missing; existing files of the same names are
    replaced. The same ``seed`` and ``per_batch`` always give identical bytes.
    """
    if per_batch < 1:
        raise ValueError(f"per_batch must be at least 1, got {per_batch}")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    patterns = _class_patterns(rng)
    files: list[tuple[str, object]] = []
    for i, name in enumerate(TRAIN_BATCHES, start=1):
        batch = make_batch(
            rng=rng,
            patterns=patterns,
            count=per_batch,
            batch_label=f"training batch {i} of {len(TRAIN_BATCHES)}",
            first_serial=(i - 1) * per_batch,
        )
        files.append((name, batch))
    test = make_batch(
        rng=rng,
        patterns=patterns,
        count=per_batch,
        batch_label="testing batch 1 of 1",
        first_serial=len(TRAIN_BATCHES) * per_batch,
    )
    files.append((TEST_BATCH, test))
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [name.encode() for name in LABEL_NAMES],
        b"num_vis": PIXELS_PER_IMAGE,
    }
    files.append((META_FILE, meta))
    written: list[Path] = []
    for name, obj in files:
        path = out / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(dumps_py2(obj))
        tmp.replace(path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to write into")
    parser.add_argument("--per-batch", type=int, default=64, help="images per batch file (real data: 10000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (output is a function of it)")
    args = parser.parse_args(argv)
    try:
        paths = write_dataset(out=args.out, per_batch=args.per_batch, seed=args.seed)
    except (ValueError, OSError) as err:
        print(f"make_cifar10: {err}", file=sys.stderr)
        return 2
    print(f"make_cifar10: wrote {len(paths)} files, {args.per_batch} images per batch, to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
