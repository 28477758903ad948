"""The launcher's self-check on the python3 of Debian bullseye (3.9), bookworm (3.11) and trixie (3.13).

Each run is ``python3 -I -S /ring/ring-launch.pyz --print json`` in a plain
Debian root with nothing but python3 (:mod:`tests.support.pythonroots`):
file mode from a kubelet-style directory, and API mode *in cluster*, with a
real bound service-account token and the cluster CA projected where the
kubelet puts them and ``KUBERNETES_SERVICE_HOST``/``PORT`` set as in a pod.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ranktable.clusterspec import spec_to_json
from ranktable.hccl import render_hccl
from ranktable.launch import exitcodes
from ranktable.stored import pack, plain_size
from ranktable.tfconfig import tf_config
from tests.support import launcherpyz, pythonroots
from tests.support.kubeletdir import KubeletDir
from tests.support.launcherapi import host_port, put_spec, service_account, service_account_dir, tf_config_of
from tests.support.specs import make_spec

pytestmark = pytest.mark.integration

POD = "job-worker-2"
CM = "rings-config-job"
#: The real path of /var/run/secrets/... in a Debian root (/var/run is a symlink to /run).
SA_DIR = "/run/secrets/kubernetes.io/serviceaccount"
SUITES = list(pythonroots.SUITES)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("dist")
    launcherpyz.build(directory / "ring-launch.pyz")
    return directory


def pyz(suite: str, *args: str, binds: dict[str, Path], env: dict[str, str]) -> Any:
    return pythonroots.run_in(
        suite, ["python3", "-I", "-S", "/ring/ring-launch.pyz", *args], binds=binds, env={"POD_NAME": POD, **env}
    )


@pytest.mark.parametrize("suite", SUITES)
def test_file_mode(suite: str, dist: Path, tmp_path: Path) -> None:
    volume = KubeletDir(tmp_path / "config")
    (tmp_path / "config").mkdir()
    spec = make_spec([("chief", 1), ("worker", 3)])
    volume.publish_spec(spec)
    result = pyz(
        suite, "--config-dir", "/etc/ring-config", "--timeout", "20", "--print", "json",
        binds={"/ring": dist, "/etc/ring-config": tmp_path / "config"}, env={},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert tf_config_of(result.stdout) == tf_config(spec, pod=POD)
    assert json.loads(result.stdout)["RANK"] == "3"


@pytest.mark.parametrize("suite", SUITES)
def test_api_mode_in_cluster(
    suite: str, dist: Path, tmp_path: Path, k8s: Any, kubeconfig: Path, namespace: str
) -> None:
    spec = make_spec([("worker", 4)])
    put_spec(k8s, namespace, CM, spec)
    token = service_account(k8s, namespace, "trainer", configmap=CM, verbs=["get", "list", "watch"])
    host, port = host_port(kubeconfig)
    result = pyz(
        suite, "--from-api", "--timeout", "20", "--print", "json",
        binds={"/ring": dist, SA_DIR: service_account_dir(kubeconfig, token, tmp_path / "sa")},
        env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "POD_NAMESPACE": namespace,
             "RING_CONFIGMAP": CM},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert tf_config_of(result.stdout) == tf_config(spec, pod=POD)


@pytest.mark.parametrize("suite", SUITES)
def test_compressed_form_local_rank_table_in_tmp_and_a_warning_without_tmp(
    suite: str, dist: Path, tmp_path: Path
) -> None:
    spec = make_spec([("worker", 4)], devices=2)
    files = {"cluster.json": spec_to_json(spec), "hccl.json": render_hccl(spec)}
    (tmp_path / "config").mkdir()
    KubeletDir(tmp_path / "config").publish(dict(pack(files, limit=plain_size(files) - 1).binary_data))
    args = ("--config-dir", "/etc/ring-config", "--timeout", "20", "--print", "json")
    binds = {"/ring": dist, "/etc/ring-config": tmp_path / "config"}
    # The read-only root alone: no writable /tmp, so no local copy; a warning, and the launch goes on.
    bare = pyz(suite, *args, binds=binds, env={})
    assert bare.returncode == 0, bare.stderr
    assert "RANK_TABLE_FILE" not in json.loads(bare.stdout) and json.loads(bare.stdout)["RANK"] == "2"
    assert "warning: cannot write the rank table" in bare.stderr
    # With /tmp mounted (the emptyDir of the documented pod template), twice as a restart would.
    (tmp_path / "tmp").mkdir()
    for _ in range(2):
        result = pyz(suite, *args, binds={**binds, "/tmp": tmp_path / "tmp"}, env={})
        assert result.returncode == 0, result.stderr
        path = json.loads(result.stdout)["RANK_TABLE_FILE"]
        assert path.startswith(f"/tmp/ring-hccl-{os.getuid()}/hccl-"), path
        assert (tmp_path / path.lstrip("/")).read_text() == files["hccl.json"]
    assert [p.name for p in (tmp_path / path.lstrip("/")).parent.iterdir() if p.name != ".lock"] == [Path(path).name]


def test_api_mode_without_the_token_file_exits_78(dist: Path, tmp_path: Path, kubeconfig: Path) -> None:
    sa = service_account_dir(kubeconfig, "unused", tmp_path / "sa")
    (sa / "token").unlink()
    host, port = host_port(kubeconfig)
    result = pyz(
        "bullseye", "--from-api", "--namespace", "ns", "--configmap", CM, "--print", "json",
        binds={"/ring": dist, SA_DIR: sa}, env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    )  # fmt: skip
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    assert result.stderr.strip() == (
        "ring-launch: error: in-cluster API access needs the service account token at "
        "/var/run/secrets/kubernetes.io/serviceaccount/token, which is missing "
        "(automountServiceAccountToken: false on the pod or its service account?)"
    )
