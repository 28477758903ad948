#!/usr/bin/env python3
"""Example: CIFAR-10 on MultiWorkerMirroredStrategy, configured by ring-launch.

This is the seed runtime's training script reworked for ring-controller. The
seed built ``TF_CONFIG`` itself by probing headless-service DNS names until
two probes agreed; here the cluster spec comes from the controller:

* Normally the script runs under ``ring-launch -- python train.py ...``, which
  exports ``TF_CONFIG`` (IP-based, complete) before this process starts.
* Run directly without ``TF_CONFIG``, it calls the drop-in
  ``ranktable.tfconfig.setup_tf_config()``, which waits for the same spec.

Either way ``TF_CONFIG`` is in the environment before ``import tensorflow``:
TensorFlow reads it when the strategy starts its gRPC server, and a worker
whose configuration changes after that rejoins with a "different
incarnation" and is refused by its peers. The data is read (and checked)
before that too, so a missing dataset fails in milliseconds, not after the
cluster has formed.

Training uses a custom loop (``strategy.run`` + ``strategy.reduce``): Keras 3
``model.fit`` under MultiWorkerMirroredStrategy fails with TensorFlow 2.21.
Every worker reads its own shard of the data; gradients are all-reduced, so
all workers hold identical weights after every step, and the printed loss is
the global (all-reduced) loss, identical on every worker.

Data: the "CIFAR-10 python version" pickle batches (``data_batch_1..5``,
``test_batch``) from ``--data-dir`` (env ``CIFAR10_DIR``, default the seed's
mount path). Nothing is downloaded. ``make_cifar10.py`` writes small
synthetic batches in the same format.

Checkpoints (``--checkpoint-dir``, env ``CHECKPOINT_DIR``): every
``--checkpoint-every`` steps the model and optimizer are saved with
``tf.train.CheckpointManager``; every worker saves (MultiWorkerMirroredStrategy
wants all of them to), worker 0 (or the chief) into the directory, the others
into a scratch directory they delete again. At start every worker restores the
latest checkpoint of the directory and continues from its step, so a trainer
restarted by ``ring-launch --supervise`` (``RING_RESTART_COUNT``) or a
recreated pod resumes instead of starting over. The directory must be shared
by the workers (a volume; here, the same machine).

Output, for people and for tests:

* stdout: ``strategy ready workers=N task=worker:i`` once the cluster has
  formed, then ``step=K loss=X`` per step, then ``done ...``.
* ``--result FILE``: a JSON document with the loss history, a SHA-256 of the
  final weights and their sum, the number of steps, the task, and wall-clock
  timestamps (``time.time()``) of start, TensorFlow imported, strategy ready,
  first step done and end; with checkpoints also the step it resumed from and
  ``RING_RESTART_COUNT``.

Exit status: 0 on success, 2 on a usage or data error (message on stderr),
anything else is TensorFlow failing.
"""

from __future__ import annotations

import time

T_START = time.time()

import argparse  # noqa: E402  (the start time is taken before anything else)
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

import numpy as np  # noqa: E402
from numpy.typing import NDArray  # noqa: E402

DEFAULT_DATA_DIR = "/workspace/data/cifar-10-batches-py"
"""Where the seed runtime mounts the dataset (a hostPath volume)."""

TRAIN_FILES: tuple[str, ...] = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
NUM_CLASSES = 10

# The only globals a CIFAR-10 batch needs to unpickle (numpy 1.x and 2.x
# spellings of the array reconstructor). Anything else is refused, so a
# tampered data file cannot run code.
_ALLOWED_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }
)


class UsageError(Exception):
    """A problem the user must fix (data, configuration); exit status 2."""


def fail(message: str) -> NoReturn:
    print(f"train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


# --------------------------------------------------------------------------
# Data (no TensorFlow here: it runs before TF_CONFIG exists)


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


@dataclass(frozen=True)
class Dataset:
    """Images as float32 NHWC in [0, 1], labels as int32."""

    x_train: NDArray[np.float32]
    y_train: NDArray[np.int32]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.int32]


def _read_batch(path: Path) -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    try:
        with path.open("rb") as f:
            batch = _BatchUnpickler(f, encoding="bytes").load()
        data = np.asarray(batch[b"data"])
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise UsageError(f"{path} is not a CIFAR-10 python batch: {err!r}") from err
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise UsageError(f"{path}: data must be a uint8 array of N x 3072, got {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],) or labels.min(initial=0) < 0 or labels.max(initial=0) >= NUM_CLASSES:
        raise UsageError(f"{path}: labels must be {data.shape[0]} ints in 0..9")
    # Rows are R, G, B planes of 32x32, row-major: (N, 3, 32, 32) -> NHWC.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return images, labels.astype(np.int32)


def load_cifar10(data_dir: Path) -> Dataset:
    """Read the five training batches and the test batch from ``data_dir``.

    Raises ``UsageError`` naming every missing file, or the malformed one.
    """
    if not data_dir.is_dir():
        raise UsageError(
            f"CIFAR-10 data directory {data_dir} does not exist; expected the "
            f"'CIFAR-10 python version' batches {', '.join(TRAIN_FILES)}, {TEST_FILE} "
            "(set --data-dir or CIFAR10_DIR; make_cifar10.py writes synthetic ones)"
        )
    missing = [name for name in (*TRAIN_FILES, TEST_FILE) if not (data_dir / name).is_file()]
    if missing:
        raise UsageError(
            f"CIFAR-10 batches missing in {data_dir}: {', '.join(missing)} "
            "(this program never downloads; copy the 'CIFAR-10 python version' files "
            "there or generate synthetic ones with make_cifar10.py --out DIR)"
        )
    train = [_read_batch(data_dir / name) for name in TRAIN_FILES]
    x_test, y_test = _read_batch(data_dir / TEST_FILE)
    return Dataset(
        x_train=np.concatenate([x for x, _ in train]),
        y_train=np.concatenate([y for _, y in train]),
        x_test=x_test,
        y_test=y_test,
    )


# --------------------------------------------------------------------------
# TF_CONFIG (still no TensorFlow)


def ensure_tf_config() -> tuple[str, dict[str, Any]]:
    """Make sure ``TF_CONFIG`` is set; return (where it came from, parsed value)."""
    if "tensorflow" in sys.modules:
        raise AssertionError("tensorflow was imported before TF_CONFIG was settled")
    source = "environment"
    if not os.environ.get("TF_CONFIG"):
        # Only in this case: the launcher is the normal path, and the drop-in
        # pulls in the ring-controller package.
        try:
            from ranktable.tfconfig import setup_tf_config
        except ImportError as err:
            raise UsageError(
                "TF_CONFIG is not set and ranktable.tfconfig cannot be imported "
                f"({err}); run under `ring-launch -- ...` or install ring-controller"
            ) from err
        try:
            setup_tf_config()
        except Exception as err:  # timeout, pod not in spec, bad spec: all end here
            raise UsageError(f"no TF_CONFIG from the ring-controller spec: {type(err).__name__}: {err}") from err
        source = "ranktable.tfconfig.setup_tf_config"
        if not os.environ.get("TF_CONFIG"):
            raise UsageError("setup_tf_config() returned without setting TF_CONFIG")
    raw = os.environ["TF_CONFIG"]
    try:
        config = json.loads(raw)
        workers = config["cluster"]["worker"]
        task = config["task"]
        if not isinstance(workers, list) or not workers:
            raise ValueError("cluster.worker must be a non-empty list")
        str(task["type"])
        int(task["index"])
    except (ValueError, KeyError, TypeError) as err:
        raise UsageError(f"TF_CONFIG is malformed ({err!r}): {raw}") from err
    return source, config


# --------------------------------------------------------------------------
# Options


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        fail(f"environment variable {name}={value!r} is not an integer")


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        fail(f"environment variable {name}={value!r} is not a number")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags win over environment variables (the runtime's overrides)."""
    p = argparse.ArgumentParser(description="CIFAR-10 MultiWorkerMirroredStrategy example (TF_CONFIG from ring-launch)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("CIFAR10_DIR") or DEFAULT_DATA_DIR),
        help="directory with data_batch_1..5 and test_batch (env CIFAR10_DIR)",
    )
    p.add_argument("--epochs", type=int, default=_env_int("EPOCHS", 10), help="env EPOCHS")
    p.add_argument(
        "--batch-size",
        type=int,
        default=_env_int("BATCH_SIZE", 64),
        help="per-worker batch; the global batch is this times the workers (env BATCH_SIZE)",
    )
    p.add_argument("--learning-rate", type=float, default=_env_float("LEARNING_RATE", 0.02), help="env LEARNING_RATE")
    p.add_argument(
        "--steps", type=int, default=_env_int("STEPS", 0), help="stop after N steps in total, 0 = no limit (env STEPS)"
    )
    p.add_argument("--seed", type=int, default=_env_int("SEED", 1234), help="env SEED")
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path(os.environ["CHECKPOINT_DIR"]) if os.environ.get("CHECKPOINT_DIR") else None,
        help="save and resume from checkpoints here, shared by all workers (env CHECKPOINT_DIR)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=_env_int("CHECKPOINT_EVERY", 10),
        help="steps between checkpoints (env CHECKPOINT_EVERY)",
    )
    p.add_argument(
        "--step-delay",
        type=float,
        default=_env_float("STEP_DELAY", 0.0),
        help="seconds to pause after each step, to stretch a demo or test run (env STEP_DELAY)",
    )
    p.add_argument(
        "--result",
        type=Path,
        default=Path(os.environ["RESULT_FILE"]) if os.environ.get("RESULT_FILE") else None,
        help="write a JSON result here at the end (env RESULT_FILE); '-': one 'RESULT {json}' line on stdout",
    )
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps < 0:
        p.error("--steps must be >= 0")
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be at least 1")
    if args.step_delay < 0:
        p.error("--step-delay must be >= 0")
    return args


# --------------------------------------------------------------------------
# Training (TensorFlow from here on)


def weights_digest(weights: list[NDArray[Any]]) -> tuple[str, float]:
    """SHA-256 over the float32 little-endian bytes of all weights, and their sum."""
    h = hashlib.sha256()
    total = 0.0
    for w in weights:
        arr = np.ascontiguousarray(w, dtype="<f4")
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
        total += float(arr.astype(np.float64).sum())
    return h.hexdigest(), total


def train(args: argparse.Namespace, data: Dataset, tf_config: dict[str, Any], source: str) -> dict[str, Any]:
    import keras
    import tensorflow as tf  # imported here: TF_CONFIG is set by now

    t_tf_imported = time.time()
    keras.utils.set_random_seed(args.seed)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    task_type, task_id = str(resolver.task_type), int(resolver.task_id)
    cluster = resolver.cluster_spec().as_dict()
    num_workers = sum(len(cluster.get(role, [])) for role in ("chief", "worker"))
    t_ready = time.time()
    print(f"strategy ready workers={num_workers} task={task_type}:{task_id}", flush=True)

    global_batch = args.batch_size * num_workers
    per_worker_examples = len(data.y_train) // num_workers
    steps_per_epoch = max(1, per_worker_examples // args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    if args.steps:
        total_steps = min(total_steps, args.steps)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(per_worker_examples, seed=args.seed, reshuffle_each_iteration=True)
        # repeat() before batch(): every worker runs exactly total_steps
        # steps, even when shards differ by one example; a worker that ran
        # out early would leave its peers waiting in the all-reduce forever.
        return ds.repeat().batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(32, 32, 3)),
                keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
                keras.layers.Flatten(),
                keras.layers.Dense(NUM_CLASSES),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=args.learning_rate, momentum=0.9)
        optimizer.build(model.trainable_variables)  # its slots exist before a restore, not lazily after

    manager = None
    resumed_from = 0
    if args.checkpoint_dir is not None:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        leader = task_type == "chief" or (task_type == "worker" and task_id == 0 and "chief" not in cluster)
        write_dir = args.checkpoint_dir if leader else args.checkpoint_dir / f".scratch-{task_type}-{task_id}"
        manager = tf.train.CheckpointManager(checkpoint, str(write_dir), max_to_keep=3)
        latest = tf.train.latest_checkpoint(str(args.checkpoint_dir))
        if latest is not None:
            checkpoint.restore(latest).assert_existing_objects_matched()
            resumed_from = int(latest.rsplit("-", 1)[1])
            print(f"resumed from {latest} step={resumed_from}", flush=True)

    def train_step_fn(batch: Any) -> Any:
        def step_fn(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(step_fn, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    train_step: Any = tf.function(train_step_fn)

    losses: list[float] = []
    t_first_step: float | None = None
    for step in range(resumed_from + 1, total_steps + 1):
        loss = float(train_step(next(iterator)))
        losses.append(loss)
        if t_first_step is None:
            t_first_step = time.time()
        epoch = (step - 1) // steps_per_epoch + 1
        print(f"step={step} loss={loss:.6f} epoch={epoch}", flush=True)
        if manager is not None and (step % args.checkpoint_every == 0 or step == total_steps):
            manager.save(checkpoint_number=step)
            if manager.directory != str(args.checkpoint_dir):
                tf.io.gfile.rmtree(manager.directory)
        if args.step_delay:
            time.sleep(args.step_delay)

    weights = [np.asarray(w.numpy()) for w in model.weights]
    digest, weights_sum = weights_digest(weights)
    logits = model(data.x_test, training=False)
    test_accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == data.y_test))
    t_end = time.time()
    print(
        f"done steps={len(losses)} loss={losses[-1] if losses else float('nan'):.6f} "
        f"test_accuracy={test_accuracy:.4f} weights_sha256={digest} weights_sum={weights_sum:.6f}",
        flush=True,
    )
    return {
        "task": {"type": task_type, "index": task_id},
        "workers": num_workers,
        "tf_config": tf_config,
        "tf_config_source": source,
        "tensorflow_version": tf.__version__,
        "steps": len(losses),
        "resumed_from_step": resumed_from,
        "last_step": resumed_from + len(losses),
        "restart_count": int(os.environ.get("RING_RESTART_COUNT") or 0),
        "steps_per_epoch": steps_per_epoch,
        "global_batch_size": global_batch,
        "losses": losses,
        "test_accuracy": test_accuracy,
        "weights_sha256": digest,
        "weights_sum": weights_sum,
        "timestamps": {
            "start": T_START,
            "tensorflow_imported": t_tf_imported,
            "strategy_ready": t_ready,
            "first_step": t_first_step,
            "end": t_end,
        },
    }


def write_json_atomically(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = load_cifar10(args.data_dir)
        source, tf_config = ensure_tf_config()
    except UsageError as err:
        fail(str(err))
    print(
        f"train: TF_CONFIG={json.dumps(tf_config, separators=(',', ':'))} (from {source})", file=sys.stderr, flush=True
    )
    result = train(args, data, tf_config, source)
    if args.result is not None and str(args.result) == "-":
        print(f"RESULT {json.dumps(result, sort_keys=True, separators=(',', ':'))}", flush=True)
    elif args.result is not None:
        write_json_atomically(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
