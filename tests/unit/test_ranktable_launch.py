"""The launcher exports RANK_TABLE_FILE for every rank table version the controller writes.

The files come from the real decision (``agent.decide``) on an Ascend job, are
written into a directory the way a mounted ConfigMap shows them, and a real
``ring-launch`` subprocess execs a child that reads the table back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ranktable
from agent.decide import decide
from model.pod import pod_record
from model.volcano import workload_record
from ranktable.hccl import VERSIONS, hccl_version, read_hccl
from tests.support.factories import pod_template, volcano_job, volcano_pod

REPO = str(Path(ranktable.__file__).resolve().parent.parent)
CHILD = (
    "import json,os; path=os.environ['RANK_TABLE_FILE']; table=json.load(open(path));"
    "print(json.dumps({'path': path, 'status': table['status'], 'version': table.get('version', 'v1')}))"
)


def _files(version: str) -> dict[str, str]:
    template = pod_template(runtime="ascend-910", npus=2)
    raw = volcano_job("j", tasks=[("worker", 2)], uid="job-uid", template=template)
    raw["metadata"]["annotations"] = {"sp-block": "4"}
    wl = workload_record(raw, label_key="ring-controller.atlas")
    pods = []
    for i in range(2):
        annotation = {
            "pod_name": f"j-worker-{i}",
            "server_id": f"uid-{i}",
            "host_ip": f"10.0.0.{i + 1}",
            "super_pod_id": 0,
            "devices": [
                {"device_id": str(d), "device_ip": f"192.168.{d}.{i + 1}", "super_device_id": str(16 * i + d)}
                for d in range(2)
            ],
        }
        raw_pod = volcano_pod(
            raw,
            task="worker",
            index=i,
            uid=f"pod-{i}",
            ip=f"127.1.0.{i + 1}",
            phase="Running",
            annotations={"ascend.kubectl.kubernetes.io/ascend-910-configuration": json.dumps(annotation)},
        )
        pods.append(pod_record(raw_pod))
    d = decide(wl, pods, previous=None, hccl_version=version)
    assert d.spec.status == "completed" and d.data is not None, d.problems
    return d.data


@pytest.mark.parametrize("version", VERSIONS)
def test_launcher_exports_rank_table_file_for_every_version(tmp_path: Path, version: str) -> None:
    files = _files(version)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [sys.executable, "-m", "ranktable.launch.launcher", "--config-dir", str(tmp_path), "--timeout", "5"]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, "POD_NAME": "j-worker-1"}
    result = subprocess.run(
        [*argv, "--", sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["path"] == str(tmp_path / "hccl.json")
    assert seen["status"] == "completed"
    own = hccl_version(read_hccl(files["hccl.json"]))
    assert seen["version"] == own == {"v2": "1.0"}.get(version, version)
