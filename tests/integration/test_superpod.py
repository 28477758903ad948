"""A 1,024 x 16 A3 job (16,384 NPUs, 22 super pods of 48 nodes) end to end on the real control plane.

The controller writes its spec, which does not fit a ConfigMap as plain keys,
gzip-compressed into ``binaryData``; the ConfigMap is projected into a
directory exactly as the kubelet mounts it (``binaryData`` keys as files of
raw bytes, the ``..data`` swap); the launcher's code on that directory gives
every member its rank, and real ``ring-launch --print json`` processes (the
first, a middle and the last member) a ``RANK_TABLE_FILE`` with all 16,384
devices. The pods run on kwok's fake nodes, so the test adds nodes to the
shared dev cluster when it has fewer than 1,024 pods need (250 per node).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from model.keys import CONFIGMAP_DATA_LIMIT
from ranktable.clusterspec import spec_from_json
from ranktable.hccl import read_hccl
from ranktable.launch.launcher import launch_env
from ranktable.launch.wait import FileSource, Ready
from ranktable.stored import binary_from_json, files_from_configmap
from ringdevcluster import ensure_up
from ringdevcluster.kwok import PODS_PER_NODE
from tests.support import superpod
from tests.support.clients import devcluster_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.kubectlring import ring, table
from tests.support.kubehelp import create_volcano_job, events_for, read_configmap, read_spec, wait_for, wait_spec
from tests.support.kubeletdir import KubeletDir

SHAPE = superpod.shape("a3-1024x16")


def _create_pods(k8s: Any, namespace: str, job: dict[str, Any]) -> None:
    def create(i: int) -> None:
        k8s.core.create_namespaced_pod(namespace, superpod.kwok_pod(SHAPE, job, i))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, range(SHAPE.servers)))


def _launch(volume: Path, pod: str, tmp: Path) -> dict[str, str]:
    env = {**os.environ, "POD_NAME": pod, "RING_CONFIG_DIR": str(volume), "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-m", "ranktable.launch.launcher", "--timeout", "60", "--print", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def pods_gone(k8s: Any, namespace: str) -> Iterator[None]:
    """Afterwards, the test's pods deleted and gone: 1,024 pods left to the namespace's
    deletion would keep the shared control plane (and kwok) busy under the next tests."""
    yield
    k8s.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not k8s.core.list_namespaced_pod(namespace, limit=1).items, timeout=300, what="pods deleted")


def test_a3_job_of_1024_servers_by_16_dies_end_to_end(
    devcluster: Any, k8s: Any, namespace: str, controller: ControllerProcess, tmp_path: Path, pods_gone: None
) -> None:
    ensure_up(state_dir=devcluster_state_dir(), nodes=max(4, math.ceil(SHAPE.servers / (PODS_PER_NODE * 0.8))))
    raw = superpod.workload(SHAPE, name="a3", namespace=namespace, uid="")
    raw["metadata"].pop("uid", None)
    job = create_volcano_job(k8s, namespace, raw)
    _create_pods(k8s, namespace, job)
    spec_json = wait_spec(k8s, namespace, "rings-config-a3", timeout=600)
    assert len(spec_json["members"]) == SHAPE.servers

    cm = k8s.api.sanitize_for_serialization(k8s.core.read_namespaced_config_map("rings-config-a3", namespace))
    binary = binary_from_json(cm.get("binaryData"))
    # Stored compressed (the plain files are over 1 MiB), whole: no plain spec key beside it.
    assert set(binary) == {"cluster.json.gz", "hccl.json.gz"} and not (cm.get("data") or {})
    files = files_from_configmap(cm)
    plain = sum(len(t.encode()) for t in files.values())
    stored = sum(len(b) for b in binary.values())
    print(f"FIGURE a3-1024x16 on the control plane: {plain} bytes plain, {stored} stored")
    assert stored <= CONFIGMAP_DATA_LIMIT < plain

    # The ConfigMap projected as the kubelet mounts it.
    volume = tmp_path / "ring-config"
    volume.mkdir()
    KubeletDir(volume).publish(binary)
    obs = FileSource(str(volume)).read()
    assert obs.cluster == files["cluster.json"] and obs.hccl == files["hccl.json"]
    spec = spec_from_json(obs.cluster)
    pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
    # Every member its rank (job spec order), through the launcher's own derivation.
    for rank, member in enumerate(spec.members):
        assert member.pod == f"a3-worker-{rank}" and member.ip == pods[member.pod].status.pod_ip
        exports = launch_env(Ready(spec=spec, member=member, hccl=obs.hccl), rank_table_file="/table")
        assert (exports["RANK_ID"], exports["RANK_SIZE"]) == (str(rank * 16), "16384")
    # Real launcher processes on the projected volume: rank, and a local table of every device.
    for rank in (0, 511, SHAPE.servers - 1):
        exported = _launch(volume, f"a3-worker-{rank}", tmp_path)
        assert exported["RANK_ID"] == str(rank * 16)
        path = exported["RANK_TABLE_FILE"]
        assert not path.startswith(str(volume))  # the compressed form has no hccl.json to name: a local copy
        rank_table = read_hccl(Path(path).read_text())
        assert rank_table["status"] == "completed" and rank_table["version"] == "1.2"
        assert sum(len(s["device"]) for s in rank_table["server_list"]) == 16384
        assert len(rank_table["super_pod_list"]) == 22
    # kubectl ring reads the compressed form too: the job completed, every member counted.
    (row,) = table(ring("get", "-n", namespace, kubeconfig=devcluster.kubeconfig, timeout=180).stdout)
    assert (row["NAME"], row["STATUS"], row["READY"]) == ("a3", "completed", "1024/1024"), row
    described = ring("describe", "a3", "-n", namespace, kubeconfig=devcluster.kubeconfig, timeout=180).stdout
    assert re.search(
        r"Spec: +completed, epoch 1, written .* ago, gzip-compressed: [\d,]+ of 1,048,576 bytes", described
    )
    shown = ring("env", "a3-worker-1023", "-n", namespace, "-o", "json", kubeconfig=devcluster.kubeconfig, timeout=180)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["RANK_ID"] == str(1023 * 16)


def test_a_spec_too_large_even_compressed_is_refused_and_the_written_one_stays(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    # Table 2.0 copies each device's levels; random 12,000-character net_attr values (the device
    # plugin's strings are opaque here) do not compress: 16 servers x 8 devices pass 1 MiB gzipped.
    s = superpod.shape("a5-16x8")
    raw = superpod.workload(s, name="huge", namespace=namespace, uid="")
    raw["metadata"].pop("uid", None)
    job = create_volcano_job(k8s, namespace, raw)

    def pod(i: int) -> dict[str, Any]:
        body = superpod.kwok_pod(s, job, i)
        value = json.loads(body["metadata"]["annotations"][s.annotation_key])
        for device in value["devices"]:
            device["levelList"][0]["info"]["UB"]["net_attr"] = secrets.token_urlsafe(9000)
        body["metadata"]["annotations"][s.annotation_key] = json.dumps(value)
        return body

    for i in range(s.servers - 1):
        k8s.core.create_namespaced_pod(namespace, pod(i))
    before = wait_for(lambda: read_configmap(k8s, namespace, "rings-config-huge"), what="the initializing spec written")
    assert (read_spec(k8s, namespace, "rings-config-huge") or {})["status"] == "initializing"
    k8s.core.create_namespaced_pod(namespace, pod(s.servers - 1))
    (event,) = wait_for(
        lambda: [e for e in events_for(k8s, namespace, "huge") if e.reason == "SpecTooLarge"], what="SpecTooLarge"
    )
    assert event.type == "Warning"
    sizes = re.match(
        r"spec of 16 members is (\d+) bytes plain, (\d+) bytes gzip-compressed, "
        r"over the ConfigMap limit of 1048576 bytes; no spec is written",
        event.message,
    )
    assert sizes is not None, event.message
    # What the user can do: how many members would fit, and a rank table version with shorter entries.
    assert f"About {16 * 1048576 // int(sizes[2]):,} members of this job fit one ConfigMap" in event.message
    assert "a rank table version with shorter entries" in event.message
    assert controller.metric("ringcontroller_invalid_inputs_total", kind="vcjob", reason="too_large") == 1.0
    # Nothing written over the last good state: the same ConfigMap version, still initializing.
    after = read_configmap(k8s, namespace, "rings-config-huge")
    assert after is not None and after.metadata.resource_version == before.metadata.resource_version
    assert (read_spec(k8s, namespace, "rings-config-huge") or {})["status"] == "initializing"
