"""One 20,000-member spec from the launcher's side: its stored size, and what a launcher pays to start on it.

    python -m tests.bench.bigspec [--members 20000] [--repeats 5] [--json OUT]

For a plain job and one with one Ascend device per member (so ``hccl.json``
is written, table 1.0 as ``--ranktable-version auto`` picks for ascend-910),
it renders the files as the controller does, packs them into the form the
ConfigMap holds (:func:`ranktable.stored.pack`, the API server's 1 MiB) and
publishes that form in a kubelet-style volume. The decode (gunzip and
``spec_from_json``, CPU time in this process) is timed ``--repeats`` times. Then ``ring-launch`` (the
module, file mode) runs ``--repeats`` times on it for one member and execs
``true``: wall time from fork to exit (reading, decompressing and parsing
the spec, writing the hostfiles and the rank table copy, fitting the exec
limit, exec), CPU, and peak RSS from ``wait4``. Progress to stderr, the
table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from model.keys import CONFIGMAP_DATA_LIMIT
from ranktable.clusterspec import (
    CLUSTER_FILE,
    HCCL_FILE,
    spec_from_json,
    spec_to_json,
)
from ranktable.hccl import render_hccl
from ranktable.stored import TooLarge, pack, unpack
from tests.support.kubeletdir import KubeletDir
from tests.support.specs import big_spec

REPO = Path(__file__).resolve().parents[2]


def _launch(volume: Path, hostfiles: Path, pod: str) -> tuple[float, float, float, str]:
    """One launcher run: wall s, CPU s, peak RSS MiB, its stderr."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "POD_NAME": pod, "TMPDIR": str(hostfiles.parent)}
    argv = [
        sys.executable,
        "-m",
        "ranktable.launch.launcher",
        "--config-dir",
        str(volume),
        "--hostfile-dir",
        str(hostfiles),
        "--timeout",
        "60",
        "--",
        "true",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"ring-launch exited with {proc.returncode}: {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, err


def measure(members: int, *, devices: int, repeats: int) -> dict[str, Any]:
    """The stored form and the launcher's cost for one spec (see the module doc)."""
    s = big_spec(members, devices=devices)
    t0 = time.monotonic()
    files = {CLUSTER_FILE: spec_to_json(s)}
    if devices:
        files[HCCL_FILE] = render_hccl(s)
    render_s = time.monotonic() - t0
    row: dict[str, Any] = {
        "members": members,
        "devices_per_member": devices,
        "plain_bytes": {name: len(text.encode()) for name, text in files.items()},
        "render_s": round(render_s, 3),
    }
    try:
        stored = pack(files, limit=CONFIGMAP_DATA_LIMIT)
    except TooLarge as e:
        row["stored"] = {"too_large": str(e)}
        return row
    row["stored"] = {"compressed": stored.compressed, "bytes": stored.stored_bytes, "limit": CONFIGMAP_DATA_LIMIT}
    decode = []
    for _ in range(repeats):  # what the launcher does with the stored form before it derives anything
        c0 = time.process_time()
        spec_from_json(unpack(stored.data, stored.binary_data)[CLUSTER_FILE])
        decode.append(time.process_time() - c0)
    row["decode_cpu_s"] = {"median": round(statistics.median(decode), 3), "max": round(max(decode), 3)}
    with tempfile.TemporaryDirectory(prefix="ring-bigspec-") as tmp:
        volume = KubeletDir(Path(tmp) / "ring-config")
        volume.root.mkdir()
        volume.publish(dict(stored.binary_data) if stored.compressed else dict(stored.data))
        runs = []
        for i in range(repeats):
            pod = f"job-worker-{(i * 7919) % members}"
            wall, cpu, rss, err = _launch(volume.root, Path(tmp) / f"h{i}", pod)
            runs.append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "rss_mb": round(rss, 1)})
            print(f"bigspec: {members} x {devices} devices, run {i + 1}: {runs[-1]}", file=sys.stderr, flush=True)
        row["oversized_lines"] = [line for line in err.splitlines() if "over the exec limit" in line]
        row["launcher"] = {
            "runs": runs,
            "wall_s_median": round(statistics.median(r["wall_s"] for r in runs), 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "rss_mb_max": max(r["rss_mb"] for r in runs),
        }
    return row


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, write ``--json``."""
    p = argparse.ArgumentParser(prog="python -m tests.bench.bigspec", description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = [measure(args.members, devices=d, repeats=args.repeats) for d in (0, 1)]
    doc = {
        "command": " ".join(["python -m tests.bench.bigspec", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    for row in rows:
        launcher = row.get("launcher") or {}
        print(
            f"{row['members']} members x {row['devices_per_member']} devices: plain {row['plain_bytes']}, "
            f"stored {row['stored']}, decode CPU {row.get('decode_cpu_s')} s, launcher wall {launcher.get('wall_s_median')} s, "
            f"CPU {launcher.get('cpu_s_median')} s, RSS max {launcher.get('rss_mb_max')} MiB"
        )
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
