"""What an opt-in suite would add to CI: its addon's cold build, its cluster's start, its tests.

    python -m tests.bench.optin build lws|kueue [--json OUT]   # the addon's cold build
    python -m tests.bench.optin tests lws|kueue [--json OUT]   # its cluster's start and its tests
    python -m tests.bench.optin build torch              # the PyTorch image, built and imported
    python -m tests.bench.optin tests torch              # the workloads cluster's start and the torch tests

CI (``.ci/run``, a fresh machine with two cores) must stay within 60
minutes, so a suite that costs more than a few minutes is opt-in
(``build/test.sh --with NAME``) and its latest figures are kept here instead
(:data:`FIGURES`, rendered into docs/performance.md, "Opt-in suites").

``build`` compiles the addon's wrapper module (``build/devcluster/NAME``)
as a fresh machine would: from an empty Go build cache (``GOCACHE`` a new
directory; its Go modules already downloaded, as ``build/test.sh``'s
``--download-only`` leaves them), into a binary cache that holds every
other module's entry as it is (linked), so only that addon is built. The
built entry then joins the real binary cache if it lacks one. Wall seconds,
the CPU seconds of the build's processes, the packages compiled, the load
average around it (the machine may be shared: run it alone, or under the
lock the other builds take). ``tests`` stops the suite's cluster, then
times ``ring-devcluster up --with NAME`` (binaries cached) and pytest over
the suite's tests with its marker selected (for an image suite, the image
is built into the new cluster between the two, timed apart: ``image_s``).

``torch`` has no addon of its own: its tests run on the workloads cluster
(``--with jobset,volcano,trainer,node,prometheus``, the default run's), and
what it adds is the PyTorch image (:mod:`tests.support.torchimage`). Its
``build`` needs that cluster up (the image goes into its node's containerd):
it removes the image there and times building and importing it, with the
wheel cache and the bookworm root as the machine has them (recorded: a CI
machine has the root, from the default run's launcher images, but no
wheels).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.bench.matrix import junit_counts, outcome

__all__ = ["FIGURES", "SUITES", "Suite", "main", "measure_build", "measure_tests"]

Json = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "tests" / "bench" / "figures" / "optin.json"
_BUILT = re.compile(r"built (?P<module>\S+) (?P<version>\S+) in \S+ \((?P<packages>\d+) packages compiled")


class Suite:
    """An opt-in suite: its addon (a ``ring-devcluster --with`` name), its marker's variable, its tests, its state.

    ``up_with``: the ``--with`` of its cluster (default: the addon); ``suffix``: its state directory's
    (default ``-<addon>``); ``image``: the suite's build is an image's, not its addon's.
    """

    def __init__(
        self,
        *,
        addon: str,
        variable: str,
        tests: str,
        state_variable: str,
        up_with: str | None = None,
        suffix: str | None = None,
        image: bool = False,
    ) -> None:
        self.addon, self.variable, self.tests, self.state_variable = addon, variable, tests, state_variable
        self.up_with, self.suffix, self.image = up_with or addon, suffix or f"-{addon}", image

    def state_dir(self) -> Path:
        """The suite's cluster (``$<state_variable>``, default the main state directory + its suffix)."""
        main = Path(os.environ.get("RING_DEVCLUSTER_STATE") or ROOT / ".state" / "devcluster")
        return Path(os.environ.get(self.state_variable) or f"{main}{self.suffix}")


SUITES = {
    "lws": Suite(
        addon="lws",
        variable="RING_TEST_LWS",
        tests="tests/workloads/test_lws_controller.py",
        state_variable="RING_DEVCLUSTER_LWS_STATE",
    ),
    "kueue": Suite(
        addon="kueue",
        variable="RING_TEST_KUEUE",
        tests="tests/kueue",
        state_variable="RING_DEVCLUSTER_KUEUE_STATE",
        up_with="jobset,trainer,kueue",
    ),
    "torch": Suite(
        addon="torch",
        variable="RING_TEST_TORCH",
        tests="tests/workloads/test_torch_gloo.py",
        state_variable="RING_DEVCLUSTER_WORKLOADS_STATE",
        up_with="jobset,volcano,trainer,node,prometheus",
        suffix="-workloads",
        image=True,
    ),
}


def _tool() -> str:
    beside = Path(sys.executable).with_name("ring-devcluster")
    return str(beside) if beside.exists() else "ring-devcluster"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_build(suite: Suite, *, warm: bool = False) -> Json:
    """The cold build of ``suite``'s addon (see the module doc); raises RuntimeError when it fails.

    ``warm``: with this machine's own Go build cache instead of an empty one
    (what other builds left there is reused; recorded as ``gocache: shared``).
    """
    from ringdevcluster import build

    real = build.cache_dir()
    (real / "bin").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".optin-", dir=real))  # same file system: the entry is moved, not copied
    try:
        cache = work / "cache"
        (cache / "bin").mkdir(parents=True)
        prefix = f"{suite.addon}-"
        for entry in (real / "bin").iterdir():
            if not entry.name.startswith((prefix, ".")):
                (cache / "bin" / entry.name).symlink_to(entry)
        env = {**os.environ, "RING_DEVCLUSTER_CACHE": str(cache)}
        if not warm:
            env["GOCACHE"] = str(work / "gocache")
        load = os.getloadavg()[0]
        cpu, started = _children_cpu(), time.monotonic()
        proc = subprocess.run(
            [_tool(), "build", "--with", suite.addon], env=env, capture_output=True, text=True, check=False
        )
        wall, cpu = time.monotonic() - started, _children_cpu() - cpu
        if proc.returncode != 0:
            raise RuntimeError(f"ring-devcluster build --with {suite.addon} failed:\n{proc.stderr[-3000:]}")
        found = [m for m in _BUILT.finditer(proc.stderr) if m["module"] == suite.addon]
        if not found:
            raise RuntimeError(f"no 'built {suite.addon} ...' line in:\n{proc.stderr[-3000:]}")
        for entry in (cache / "bin").iterdir():
            if entry.name.startswith(prefix) and not entry.is_symlink() and not (real / "bin" / entry.name).exists():
                entry.rename(real / "bin" / entry.name)
        return {
            "date": _now(),
            "commit": _commit(),
            "command": f"python -m tests.bench.optin build {suite.addon}" + (" --warm" if warm else ""),
            "gocache": "shared" if warm else "empty",
            "version": found[0]["version"],
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "packages": int(found[0]["packages"]),
            "cores": os.cpu_count(),
            "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_image(suite: Suite) -> Json:
    """The PyTorch image removed from the node's containerd, then built and imported again (see the module doc)."""
    from ringdevcluster import node
    from tests.support import torchimage

    state = suite.state_dir()
    if not (state / "kubeconfig").exists():
        raise RuntimeError(f"no cluster in {state}: `ring-devcluster up --state-dir {state} --with {suite.up_with}`")
    name = torchimage.image_name()
    for ref in (name, f"docker.io/{name}"):
        subprocess.run(
            ["ctr", "--address", node.CONTAINERD_SOCKET, "-n", "k8s.io", "images", "rm", ref],
            capture_output=True,
            check=False,
        )
    timings: Json = {}
    load = os.getloadavg()[0]
    cpu, started = _children_cpu(), time.monotonic()
    torchimage.image(state / "torch-image", timings=timings)
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu
    if not timings:
        raise RuntimeError(f"{name} was still in the node's containerd: nothing was built")
    return {
        "date": _now(),
        "commit": _commit(),
        "command": f"python -m tests.bench.optin build {suite.addon}",
        "kind": "image",
        "version": torchimage.TORCH.split("==")[1],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        **timings,
        "cores": os.cpu_count(),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def measure_tests(suite: Suite) -> Json:
    """``up --with ADDON`` from a stopped cluster, then pytest over the suite (see the module doc)."""
    state = suite.state_dir()
    subprocess.run([_tool(), "down", "--state-dir", str(state)], capture_output=True, check=False)
    started = time.monotonic()
    subprocess.run([_tool(), "up", "--state-dir", str(state), "--with", suite.up_with], check=True)
    up = time.monotonic() - started
    image: Json = {}
    if suite.image:  # a new cluster's containerd lacks it; its build is the build part's figure, not the tests'
        from tests.support import torchimage

        started = time.monotonic()
        torchimage.image(state / "torch-image", timings=image)
        image["image_s"] = round(time.monotonic() - started, 1)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, suite.variable: "1", suite.state_variable: str(state)}
        started = time.monotonic()
        code = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", suite.tests, f"--junitxml={junit}"], cwd=ROOT, env=env, check=False
        ).returncode
        seconds = time.monotonic() - started
        counts = junit_counts(junit)
        cases = {
            c.get("name", ""): round(float(c.get("time", "0")), 1) for c in ET.parse(junit).getroot().iter("testcase")
        }
    return {
        "date": _now(),
        "commit": _commit(),
        "command": f"python -m tests.bench.optin tests {suite.addon}",
        "up_s": round(up, 1),
        **({"image_s": image["image_s"], "image_wheels_cached": image.get("wheels_cached")} if image else {}),
        "pytest_s": round(seconds, 1),
        "outcome": outcome(counts, exit_code=code),
        **counts,
        "tests": cases,
        "cores": os.cpu_count(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure one part of a suite and record it in ``--json``; 1 when its tests did not all pass."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.optin", description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("build", "tests"))
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--json", type=Path, default=FIGURES, help=f"the results (default {FIGURES})")
    parser.add_argument(
        "--warm", action="store_true", help="build: with this machine's Go build cache, not an empty one"
    )
    args = parser.parse_args(argv)
    suite = SUITES[args.suite]
    if args.part == "tests":
        result = measure_tests(suite)
    elif suite.image:
        result = measure_image(suite)
    else:
        result = measure_build(suite, warm=args.warm)
    doc: Json = json.loads(args.json.read_text()) if args.json.exists() else {}
    doc.setdefault(args.suite, {})[args.part] = result
    args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result.get("outcome", "passed") == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
