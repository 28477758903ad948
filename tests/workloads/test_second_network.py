"""A real second interface on the real node: TensorFlow traffic goes over the network the job names (opt-in).

Run with ``RING_TEST_SECOND_NETWORK=1`` on a workloads cluster made with
``ring-devcluster up --with node --second-network`` (the fixture asks for
one; a running cluster without it is refused with a message saying to bring
it down first). There every pod on the real node has ``eth1`` on bridge
``ringbr1`` besides ``eth0``, and the CNI chain writes the pod's
``k8s.v1.cni.cncf.io/network-status`` annotation naming that network
``default/ring-fast`` (``ringdevcluster.netstatus``), as Multus would. A
Volcano job annotated ``ring-controller.io/network: default/ring-fast``
then lists its workers at their ``eth1`` addresses with ``interface:
eth1``; ring-launch exports those addresses and the interface variables;
the two TensorFlow workers train, and their byte counters show where the
data went: the gradients' all-reduce crosses ``eth1``, ``eth0`` stays
nearly idle. With ``RING_RECORD_FIGURES=1`` as well, the byte counts go to
``tests/bench/figures/second-network.json`` (docs/performance.md renders them).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from model.keys import NETWORK_ANNOTATION, NETWORK_STATUS_ANNOTATION
from ringdevcluster import Cluster, node
from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.docblocks import FIGURES
from tests.support.kubehelp import wait_for, wait_spec
from tests.workloads.test_networks_real_node import SHOW_EXPORTS, _exported
from tests.workloads.test_tf_real_node import VOLCANO, _finished, _volcano_pods, volcano_job

pytestmark = [pytest.mark.e2e, pytest.mark.second_network]

STEPS = 8
COMMAND = "RING_TEST_SECOND_NETWORK=1 RING_RECORD_FIGURES=1 python -m pytest tests/workloads/test_second_network.py"


def counting_script(*interfaces: str) -> str:
    """A shell script for ``sh -c SCRIPT sh TRAINER...``: what ring-launch exported, the byte counters of
    ``interfaces`` (a ``COUNTERS {"eth0": {"rx": ..., "tx": ...}, ...}`` line from the pod's own
    ``/sys/class/net``), the trainer, the counters again; exits with the trainer's status."""
    count = (
        "import json; print('COUNTERS ' + json.dumps({i: {d: int(open(f'/sys/class/net/{i}/statistics/{d}_bytes')"
        f".read()) for d in ('rx', 'tx')}} for i in {list(interfaces)!r}}}), flush=True)"
    )
    return (
        f"python3 -c {shlex.quote(SHOW_EXPORTS)} && python3 -c {shlex.quote(count)} && "
        f'"$@"; code=$?; python3 -c {shlex.quote(count)}; exit $code'
    )


#: Exports, counters of eth0 and eth1, the trainer, counters again; the trainer's exit status.
SCRIPT = counting_script("eth0", "eth1")


@pytest.fixture(scope="module")
def trainer_image() -> str:
    nodejobs.ensure_trainer_images()
    return nodejobs.TRAINER_IMAGE


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def _counters(text: str) -> list[dict[str, dict[str, int]]]:
    return [json.loads(line[len("COUNTERS ") :]) for line in text.splitlines() if line.startswith("COUNTERS ")]


def test_tf_workers_train_over_the_second_interface_the_job_names(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path, workloads: Cluster
) -> None:
    assert workloads.second_network, "the workloads cluster has no second pod network (up --second-network)"
    job = volcano_job(
        "tffast", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--", "sh", "-c", SCRIPT, "sh"],
        args=["python", "/app/train.py", "--steps", str(STEPS), "--result", "-"],
    )  # fmt: skip
    job["metadata"].setdefault("annotations", {})[NETWORK_ANNOTATION] = node.SECOND_NETWORK
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tffast")),
        timeout=120,
        what="2 Volcano pods",
    )
    spec = wait_spec(k8s, namespace, "rings-config-tffast", timeout=180)
    pods = _finished(k8s, namespace, pods)
    names = ["tffast-worker-0", "tffast-worker-1"]
    by_name = {p.metadata.name: p for p in pods}
    fast = []
    for name in names:
        # The CNI chain's annotation: the cluster network (eth0, default) and the second one (eth1).
        status = json.loads(by_name[name].metadata.annotations[NETWORK_STATUS_ANNOTATION])
        assert [(e["name"], e["interface"], e["default"]) for e in status] == [
            ("ring-devcluster", "eth0", True),
            (node.SECOND_NETWORK, node.SECOND_INTERFACE, False),
        ]
        assert by_name[name].status.pod_ip in status[0]["ips"]
        ip = status[1]["ips"][0]  # the cluster's first family
        assert ipaddress.ip_address(ip) in node.addresses(workloads.ip_family).second_cidrs[0]
        fast.append(ip)
    assert [(m["pod"], m["ip"], m["port"], m.get("interface")) for m in spec["members"]] == [
        (names[0], fast[0], 2222, "eth1"),
        (names[1], fast[1], 2222, "eth1"),
    ]
    deltas = {}
    for rank, name in enumerate(names):
        text = k8s.core.read_namespaced_pod_log(name, namespace)
        env = _exported(text)["env"]
        worker = [f"[{ip}]:2222" if ":" in ip else f"{ip}:2222" for ip in fast]
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == worker
        assert (env["RING_IP"], env["MASTER_ADDR"]) == (fast[rank], fast[0])
        assert env["NCCL_SOCKET_IFNAME"] == "=eth1" and env["GLOO_SOCKET_IFNAME"] == "eth1"
        assert env["HCCL_IF_IP"] == fast[rank] and env["OMPI_MCA_btl_tcp_if_include"] == "eth1"
        log = nodejobs.parse_log(name, text)
        assert log.result, text[-1500:]
        assert log.result["tf_config"]["cluster"]["worker"] == worker
        before, after = _counters(text)
        deltas[name] = {i: after[i]["tx"] - before[i]["tx"] for i in ("eth0", "eth1")}
    print(f"bytes sent during training, per worker and interface: {deltas}")
    if os.environ.get("RING_RECORD_FIGURES") == "1":
        record = {
            "command": COMMAND,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "ip_family": workloads.ip_family,
            "workers": len(names),
            "steps": STEPS,
            "network": node.SECOND_NETWORK,
            "tx_bytes": deltas,
        }
        (FIGURES / "second-network.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    results = [nodejobs.parse_log(n, k8s.core.read_namespaced_pod_log(n, namespace)).result for n in names]
    assert len({r["weights_sha256"] for r in results if r}) == 1, "workers ended with different weights"
    for name, sent in deltas.items():
        # The all-reduce of every step's gradients crossed eth1 (a few hundred kB for 8 steps);
        # eth0 carried at most neighbour discovery.
        assert sent["eth1"] > 100_000, (name, deltas)
        assert sent["eth0"] < 10_000, (name, deltas)
