"""The launcher's self-check on every Python a training image carries, 3.9 to 3.15, each in a plain Debian root.

The matrix (:data:`tests.support.pythonroots.PYTHONS`; the roots are made
once with ``mmdebstrap --variant=minbase`` and cached):

========  ==================================================================
3.9       bullseye's ``python3``
3.10      pyenv's 3.10 (no Debian suite on the mirror has it), in the bookworm root
3.11      bookworm's ``python3``
3.12      pyenv's 3.12 (likewise), in the bookworm root
3.13      trixie's ``python3``
3.14      forky's ``python3.14`` (Debian testing)
3.15      forky's ``python3.15`` (Debian testing)
========  ==================================================================

A pyenv interpreter is bind-mounted read-only at its own path into the
bookworm root (it was built against bookworm's libraries, which the root
has): the interpreter is pyenv's, libc and OpenSSL the root's. A missing
pyenv version fails the test with what to install.

Each run is ``<python> -I -S /ring/ring-launch.pyz --print json`` in the
root, read-only, with nothing else installed (:mod:`tests.support.pythonroots`):
file mode from a kubelet-style directory, and API mode *in cluster*, with a
real bound service-account token and the cluster CA projected where the
kubelet puts them and ``KUBERNETES_SERVICE_HOST``/``PORT`` set as in a pod.
Python 3.6, 3.7 and 3.8 (pyenv's, in the bookworm root) get the entry's one
line and exit 69.
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
from tests.support.pythonroots import Python
from tests.support.specs import make_spec

pytestmark = pytest.mark.integration

POD = "job-worker-2"
CM = "rings-config-job"
#: The real path of /var/run/secrets/... in a Debian root (/var/run is a symlink to /run).
SA_DIR = "/run/secrets/kubernetes.io/serviceaccount"
PYTHONS = [pytest.param(python, id=python.version) for python in pythonroots.PYTHONS]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("dist")
    launcherpyz.build(directory / "ring-launch.pyz")
    return directory


def pyz(python: Python, *args: str, binds: dict[str, Path], env: dict[str, str]) -> Any:
    return pythonroots.run_python(
        python, ["-I", "-S", "/ring/ring-launch.pyz", *args], binds=binds, env={"POD_NAME": POD, **env}
    )


def test_the_matrix_has_every_minor_version_from_3_9_to_3_15() -> None:
    assert [python.version for python in pythonroots.PYTHONS] == [f"3.{minor}" for minor in range(9, 16)]
    assert [python.version for python in pythonroots.OLD] == ["3.6", "3.7", "3.8"]


@pytest.mark.parametrize("python", PYTHONS)
def test_file_mode(python: Python, dist: Path, tmp_path: Path) -> None:
    version = pythonroots.run_python(
        python, ["-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], binds={}, env={}
    )
    assert version.stdout.strip() == python.version, (python.how, version.stdout, version.stderr)
    volume = KubeletDir(tmp_path / "config")
    (tmp_path / "config").mkdir()
    spec = make_spec([("chief", 1), ("worker", 3)])
    volume.publish_spec(spec)
    result = pyz(
        python, "--config-dir", "/etc/ring-config", "--timeout", "20", "--print", "json",
        binds={"/ring": dist, "/etc/ring-config": tmp_path / "config"}, env={},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert tf_config_of(result.stdout) == tf_config(spec, pod=POD)
    assert json.loads(result.stdout)["RANK"] == "3"


@pytest.mark.parametrize("python", PYTHONS)
def test_api_mode_in_cluster(
    python: Python, dist: Path, tmp_path: Path, k8s: Any, kubeconfig: Path, namespace: str
) -> None:
    spec = make_spec([("worker", 4)])
    put_spec(k8s, namespace, CM, spec)
    token = service_account(k8s, namespace, "trainer", configmap=CM, verbs=["get", "list", "watch"])
    host, port = host_port(kubeconfig)
    result = pyz(
        python, "--from-api", "--timeout", "20", "--print", "json",
        binds={"/ring": dist, SA_DIR: service_account_dir(kubeconfig, token, tmp_path / "sa")},
        env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "POD_NAMESPACE": namespace,
             "RING_CONFIGMAP": CM},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert tf_config_of(result.stdout) == tf_config(spec, pod=POD)


@pytest.mark.parametrize("python", PYTHONS)
def test_compressed_form_local_rank_table_in_tmp_and_a_warning_without_tmp(
    python: Python, dist: Path, tmp_path: Path
) -> None:
    spec = make_spec([("worker", 4)], devices=2)
    files = {"cluster.json": spec_to_json(spec), "hccl.json": render_hccl(spec)}
    (tmp_path / "config").mkdir()
    KubeletDir(tmp_path / "config").publish(dict(pack(files, limit=plain_size(files) - 1).binary_data))
    args = ("--config-dir", "/etc/ring-config", "--timeout", "20", "--print", "json")
    binds = {"/ring": dist, "/etc/ring-config": tmp_path / "config"}
    # The read-only root alone: no writable /tmp, so no local copy; a warning, and the launch goes on.
    bare = pyz(python, *args, binds=binds, env={})
    assert bare.returncode == 0, bare.stderr
    assert "RANK_TABLE_FILE" not in json.loads(bare.stdout) and json.loads(bare.stdout)["RANK"] == "2"
    assert "warning: cannot write the rank table" in bare.stderr
    # With /tmp mounted (the emptyDir of the documented pod template), twice as a restart would.
    (tmp_path / "tmp").mkdir()
    for _ in range(2):
        result = pyz(python, *args, binds={**binds, "/tmp": tmp_path / "tmp"}, env={})
        assert result.returncode == 0, result.stderr
        path = json.loads(result.stdout)["RANK_TABLE_FILE"]
        assert path.startswith(f"/tmp/ring-hccl-{os.getuid()}/hccl-"), path
        assert (tmp_path / path.lstrip("/")).read_text() == files["hccl.json"]
    assert [p.name for p in (tmp_path / path.lstrip("/")).parent.iterdir() if p.name != ".lock"] == [Path(path).name]


@pytest.mark.parametrize("python", [pytest.param(python, id=python.version) for python in pythonroots.OLD])
def test_python_older_than_3_9_exits_69_in_one_line(python: Python, dist: Path) -> None:
    result = pyz(python, "--print", "json", binds={"/ring": dist}, env={})
    assert result.returncode == exitcodes.OLD_PYTHON, result.stderr
    executable = pythonroots.argv_of(python)[0][0]
    full = Path(executable).parent.parent.name  # the pyenv version directory: 3.8.18
    assert result.stderr == f"ring-launch: needs Python 3.9 or newer; {executable} is Python {full}\n"
    assert result.stdout == ""


def test_api_mode_without_the_token_file_exits_78(dist: Path, tmp_path: Path, kubeconfig: Path) -> None:
    sa = service_account_dir(kubeconfig, "unused", tmp_path / "sa")
    (sa / "token").unlink()
    host, port = host_port(kubeconfig)
    result = pyz(
        pythonroots.PYTHONS[0], "--from-api", "--namespace", "ns", "--configmap", CM, "--print", "json",
        binds={"/ring": dist, SA_DIR: sa}, env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    )  # fmt: skip
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    assert result.stderr.strip() == (
        "ring-launch: error: in-cluster API access needs the service account token at "
        "/var/run/secrets/kubernetes.io/serviceaccount/token, which is missing "
        "(automountServiceAccountToken: false on the pod or its service account?)"
    )
