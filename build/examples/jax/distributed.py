#!/usr/bin/env python3
"""Example: JAX multi-process start from ring-launch's variables, and one collective.

Run one process per pod under ``ring-launch -- python distributed.py``.
``jax.distributed.initialize()`` reads ``JAX_COORDINATOR_ADDRESS`` (rank 0's
pod IP and member port) from the environment itself; the process count and id
come from ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID``, passed on as Kubeflow
Trainer's JAX guide does. Process 0 hosts the coordinator. The script then
all-gathers one number from every process (gloo on CPU), so a run proves the
processes really formed one cluster, and writes a JSON result.

Output: ``--result FILE`` gets ``{"process_id", "process_count",
"device_count", "gathered", "coordinator"}``; exit 0 on success.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", required=True, help="JSON file to write")
    parser.add_argument("--timeout", type=int, default=120, help="seconds to wait for every process to join")
    args = parser.parse_args()

    import jax
    from jax.experimental import multihost_utils

    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        initialization_timeout=args.timeout,
    )
    import jax.numpy as jnp

    gathered = multihost_utils.process_allgather(jnp.array([100 + jax.process_index()]))
    doc = {
        "process_id": jax.process_index(),
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "gathered": [int(v) for v in gathered.reshape(-1).tolist()],
        "coordinator": os.environ["JAX_COORDINATOR_ADDRESS"],
    }
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(doc, handle)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
