"""One rank of a ring all-reduce over TCP, bound to its pod's address: the worker of ``tests.bench.topology_effect``.

    python -m tests.bench.ringworker --rank R --ring IP:PORT,IP:PORT,... --floats N --steps S
    python ringworker.py --tf-config --floats N --steps S      # in a pod, after ring-launch

``--ring`` lists every rank's address in rank order (the controller's
``cluster.json`` members); ``--tf-config`` takes the ring and the rank from
``$TF_CONFIG`` instead (``cluster.worker`` and ``task.index``, as ring-launch
exports them; IPv6 addresses bracketed). The worker listens on its own address, connects
to the next rank *from* its own address (so traffic between two pods carries
both pod IPs, as it would between two hosts, and a ``tc`` filter on source
and destination sees which racks it joins), and runs ``--steps`` all-reduces
of ``--floats`` float32 values: the classic ring (reduce-scatter, then
all-gather; 2(n-1) transfers of 1/n of the tensor to the next rank each).
After a barrier step it prints one JSON line: the seconds each all-reduce
took and whether the result is right (every rank adds ``rank + 1``).
TensorFlow's gRPC collectives cannot bind their client sockets to an
address, hence this small ring in numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

import numpy as np


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    while view:
        n = sock.recv_into(view)
        if n == 0:
            raise ConnectionError("peer closed")
        view = view[n:]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _connect(src: str, dst: tuple[str, int], deadline: float) -> socket.socket:
    while True:
        s = socket.socket(_family(src), socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.bind((src, 0))
        try:
            s.connect(dst)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def allreduce(data: np.ndarray, *, rank: int, size: int, send: socket.socket, recv: socket.socket) -> None:
    """Sum ``data`` over the ring in place (reduce-scatter, all-gather)."""
    chunks = np.array_split(data, size)
    incoming = np.empty_like(chunks[0])
    for phase in ("reduce", "gather"):
        for step in range(size - 1):
            out = chunks[(rank - step + (0 if phase == "reduce" else 1)) % size]
            target = (rank - step - 1 + (0 if phase == "reduce" else 1)) % size
            sender = threading.Thread(target=send.sendall, args=(memoryview(out).cast("B"),))
            sender.start()
            buf = incoming[: len(chunks[target])]
            _recv_exact(recv, memoryview(buf).cast("B"))
            sender.join()
            if phase == "reduce":
                chunks[target] += buf
            else:
                chunks[target][:] = buf


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int)
    p.add_argument("--ring")
    p.add_argument("--tf-config", action="store_true", help="ring and rank from $TF_CONFIG")
    p.add_argument("--floats", type=int, default=4_000_000)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args(argv)
    if a.tf_config:
        tf_config = json.loads(os.environ["TF_CONFIG"])
        ring = [_address(x) for x in tf_config["cluster"]["worker"]]
        rank = int(tf_config["task"]["index"])
    else:
        if a.ring is None or a.rank is None:
            p.error("--ring and --rank, or --tf-config")
        ring = [_address(x) for x in a.ring.split(",")]
        rank = a.rank
    size = len(ring)
    me, nxt = ring[rank], ring[(rank + 1) % size]
    listener = socket.socket(_family(me[0]), socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(me)
    listener.listen(1)
    deadline = time.monotonic() + 60
    result: dict[str, socket.socket] = {}
    acceptor = threading.Thread(target=lambda: result.__setitem__("recv", listener.accept()[0]))
    acceptor.start()
    send = _connect(me[0], nxt, deadline)
    acceptor.join()
    recv = result["recv"]
    barrier = np.zeros(size, dtype=np.float32)
    allreduce(barrier, rank=rank, size=size, send=send, recv=recv)  # every rank connected
    times, ok = [], True
    for _ in range(a.steps):
        data = np.full(a.floats, rank + 1, dtype=np.float32)
        started = time.perf_counter()
        allreduce(data, rank=rank, size=size, send=send, recv=recv)
        times.append(time.perf_counter() - started)
        ok = ok and bool(np.all(data == size * (size + 1) / 2))
    allreduce(barrier, rank=rank, size=size, send=send, recv=recv)  # nobody closes while others still send
    print(json.dumps({"rank": rank, "seconds": times, "correct": ok}), flush=True)
    for s in (send, recv, listener):
        s.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
