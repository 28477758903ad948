#!/usr/bin/env python3
"""THE BASELINE, FOR COMPARISON ONLY: TF_CONFIG by DNS probing. Not a ring-controller feature.

This is what ring-controller replaces, written here from the description of
the Kubeflow Trainer v2 custom TensorFlow runtime (the seed document), so
that ``build/bench.sh --vs-dns`` can run both on the same cluster:

* the pod's hostname is ``<trainjob>-node-0-<index>`` (Trainer maps numNodes
  onto ONE Indexed Job, so the completion index is the worker index);
* ``discover_workers()`` resolves
  ``<trainjob>-node-0-<i>.<trainjob>.<namespace>.svc.cluster.local`` for
  i = 0, 1, ... until one fails; the count of that round is the candidate.
  It accepts the count once at least two workers were found and two
  consecutive rounds agree, probing every 5 s, at most 60 rounds;
* ``TF_CONFIG`` lists the workers by those DNS names, with the port from
  ``TF_WORKER_PORT`` (default 12345), and is exported before TensorFlow is
  imported; the runtime needs ``network.publishNotReadyAddresses: true`` so
  names resolve before pods are Ready.

Used as a launcher, like ``ring-launch``:

    python dns_probe.py -- python /app/train.py ...

It prints ``[Discovery] attempt k/60: found n workers`` per round, then
``TF_CONFIG_READY <unix time> workers=<n>`` and execs the command. Exit 3
when discovery gives up, 2 on a usage error (hostname not in the pattern).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable

#: Seconds between probe rounds and the most rounds, as in the seed.
INTERVAL = 5.0
ATTEMPTS = 60
DEFAULT_PORT = 12345
HOSTNAME = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-node-0-(?P<index>[0-9]+)$")
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class DiscoveryFailed(Exception):
    """No stable count of at least two workers within the attempts."""


def parse_hostname(hostname: str) -> tuple[str, int]:
    """``(trainjob, worker index)`` from ``<trainjob>-node-0-<index>``; ValueError otherwise."""
    match = HOSTNAME.match(hostname)
    if match is None:
        raise ValueError(f"hostname {hostname!r} is not <trainjob>-node-0-<index>")
    return match.group("job"), int(match.group("index"))


def worker_name(trainjob: str, namespace: str, index: int) -> str:
    """The headless-Service DNS name of worker ``index``."""
    return f"{trainjob}-node-0-{index}.{trainjob}.{namespace}.svc.cluster.local"


def resolves(name: str) -> bool:
    """Whether ``name`` resolves (the pod's resolver: CoreDNS, its cache, search paths)."""
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return False
    return True


def discover_workers(
    trainjob: str,
    namespace: str,
    *,
    resolve: Callable[[str], bool] = resolves,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = INTERVAL,
    attempts: int = ATTEMPTS,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> int:
    """The worker count: resolve names in index order until one fails; accept a count
    of at least two once two consecutive rounds agree. Raises DiscoveryFailed."""
    previous: int | None = None
    for attempt in range(1, attempts + 1):
        found = 0
        while resolve(worker_name(trainjob, namespace, found)):
            found += 1
        if found >= 2 and found == previous:
            say(f"[Discovery] attempt {attempt}/{attempts}: found {found} workers, stable")
            return found
        say(f"[Discovery] attempt {attempt}/{attempts}: found {found} workers, retrying in {interval:g}s...")
        previous = found
        if attempt < attempts:
            sleep(interval)
    raise DiscoveryFailed(f"no stable worker count after {attempts} attempts (last: {previous})")


def tf_config(trainjob: str, namespace: str, index: int, workers: int, port: int) -> dict[str, object]:
    """TF_CONFIG with every worker by DNS name, this pod as worker ``index``."""
    return {
        "cluster": {"worker": [f"{worker_name(trainjob, namespace, i)}:{port}" for i in range(workers)]},
        "task": {"type": "worker", "index": index},
    }


def _namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"


def setup_tf_config() -> dict[str, object]:
    """The seed's function: discover, then export TF_CONFIG (call before importing TensorFlow)."""
    trainjob, index = parse_hostname(socket.gethostname())
    namespace = _namespace()
    workers = discover_workers(trainjob, namespace)
    config = tf_config(trainjob, namespace, index, workers, int(os.environ.get("TF_WORKER_PORT") or DEFAULT_PORT))
    os.environ["TF_CONFIG"] = json.dumps(config)
    return config


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    if not command:
        print("usage: dns_probe.py -- CMD [ARGS...]", file=sys.stderr)
        return 2
    try:
        config = setup_tf_config()
    except ValueError as e:
        print(f"dns_probe: {e}", file=sys.stderr)
        return 2
    except DiscoveryFailed as e:
        print(f"dns_probe: {e}", file=sys.stderr)
        return 3
    workers = len(config["cluster"]["worker"])  # type: ignore[index]
    print(f"TF_CONFIG_READY {time.time():.6f} workers={workers}", flush=True)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
