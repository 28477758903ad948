"""``ring-launch.pyz --from-api`` (standard library only) against the real API server.

The launcher runs as ``python3 -I -S dist/ring-launch.pyz`` (no site-packages:
no ``kubernetes`` package to lean on), with the kubeconfig forms users have
(client certificate data, a service account token) and Roles that grant too
little, and reads or watches a real ConfigMap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ranktable.clusterspec import STATUS_INITIALIZING
from ranktable.launch import exitcodes
from ranktable.tfconfig import tf_config
from tests.support import launcherpyz
from tests.support.kubectlring import token_kubeconfig
from tests.support.launcherapi import put_spec, service_account, tf_config_of
from tests.support.launcherpyz import HEAVY
from tests.support.specs import make_spec

pytestmark = pytest.mark.integration

POD = "job-worker-1"
CM = "rings-config-job"


@pytest.fixture(scope="module")
def pyz_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return launcherpyz.build(tmp_path_factory.mktemp("dist") / "ring-launch.pyz")


def launch(pyz: Path, kubeconfig: Path, namespace: str, *args: str) -> list[str]:
    return [
        sys.executable, "-I", "-S", str(pyz), "--from-api", "--kubeconfig", str(kubeconfig),
        "--namespace", namespace, "--configmap", CM, *args,
    ]  # fmt: skip


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "POD_NAME": POD}


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=timeout)


def test_client_certificate_kubeconfig_reads_the_completed_spec(
    k8s: Any, kubeconfig: Path, namespace: str, pyz_file: Path
) -> None:
    spec = make_spec([("worker", 3)])
    put_spec(k8s, namespace, CM, spec)
    result = run(launch(pyz_file, kubeconfig, namespace, "--timeout", "30", "--print", "json"))
    assert result.returncode == 0, result.stderr
    assert tf_config_of(result.stdout) == tf_config(spec, pod=POD)


@pytest.fixture
def waiting(
    k8s: Any, kubeconfig: Path, namespace: str, pyz_file: Path, tmp_path: Path
) -> Iterator[subprocess.Popen[str]]:
    """A launcher (service-account token, full Role) waiting on an initializing spec."""
    put_spec(k8s, namespace, CM, make_spec([("worker", 3)], status=STATUS_INITIALIZING, present={0}))
    token = service_account(k8s, namespace, "trainer", configmap=CM, verbs=["get", "list", "watch"])
    config = token_kubeconfig(kubeconfig, token, tmp_path / "trainer.kubeconfig")
    argv = launch(pyz_file, config, namespace, "--timeout", "60", "--print", "json")
    argv[1:1] = ["-X", "importtime"]  # every module it imports, one stderr line each
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.communicate()


def http_client_modules() -> set[str]:
    """What ``import http.client, ssl`` loads by itself on this Python (``random``, by ``email.utils``, among them)."""
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-I", "-S", "-c", "import http.client, ssl"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.rpartition("|")[2].strip() for line in probe.stderr.splitlines() if line.startswith("import time:")}


def test_token_kubeconfig_watches_until_the_spec_completes(
    k8s: Any, namespace: str, waiting: subprocess.Popen[str]
) -> None:
    assert waiting.stderr is not None
    said: list[str] = []
    for line in waiting.stderr:  # the launcher has listed the ConfigMap and judged it
        said.append(line)
        if "waiting: spec initializing" in line:
            break
    else:
        pytest.fail(f"the launcher ended before it waited (exit {waiting.wait()})")
    spec = make_spec([("worker", 3)], epoch=2)
    started = time.monotonic()
    put_spec(k8s, namespace, CM, spec)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert tf_config_of(out) == tf_config(spec, pod=POD)
    # It listed and watched through ranktable.launch.kubeapi on http.client, ssl and socket (public modules);
    # none of the modules a start must not load (tests/support/launcherpyz.py HEAVY) came with them.
    lines = [*said, *err.splitlines()]
    imported = {line.rpartition("|")[2].strip() for line in lines if line.startswith("import time:")}
    assert {"ranktable.launch.kubeapi", "http.client", "ssl", "socket"} <= imported
    assert sorted(name for name in imported - http_client_modules() if name.split(".")[0] in HEAVY) == []
    print(f"watch: spec written -> launcher exited in {time.monotonic() - started:.3f}s")


@pytest.mark.parametrize(
    ("verbs", "status", "refused"),
    [([], "completed", "list"), (["get", "list"], "initializing", "watch")],
    ids=["no-role-list-refused", "role-without-watch"],
)
def test_a_refusing_api_server_exits_77_naming_the_role(
    k8s: Any,
    kubeconfig: Path,
    namespace: str,
    pyz_file: Path,
    tmp_path: Path,
    verbs: list[str],
    status: str,
    refused: str,
) -> None:
    put_spec(
        k8s, namespace, CM, make_spec([("worker", 3)], status=status, present={0} if status != "completed" else None)
    )
    token = service_account(k8s, namespace, "trainer", configmap=CM if verbs else None, verbs=verbs)
    config = token_kubeconfig(kubeconfig, token, tmp_path / "trainer.kubeconfig")
    result = run(launch(pyz_file, config, namespace, "--timeout", "30", "--print", "json"))
    assert result.returncode == exitcodes.API_DENIED, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"refused to {refused} it (403 Forbidden" in last
    assert f'resourceNames ["{CM}"], verbs ["get","list","watch"] in namespace {namespace}' in last


def test_a_kubeconfig_naming_a_missing_ca_exits_78(
    kubeconfig: Path, namespace: str, pyz_file: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data")
    cluster["certificate-authority"] = str(tmp_path / "missing-ca.crt")
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text(json.dumps(config), encoding="utf-8")
    result = run(launch(pyz_file, broken, namespace, "--timeout", "30", "--print", "json"))
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    assert "cannot load the CA bundle" in result.stderr.strip().splitlines()[-1]


def test_a_server_certificate_from_another_ca_exits_78_in_one_line(
    kubeconfig: Path, namespace: str, pyz_file: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    cluster = config["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data")
    cluster["certificate-authority"] = str(Path(__file__).parents[1] / "unit" / "data" / "tls" / "other-ca.crt")
    wrong = tmp_path / "wrong-ca.kubeconfig"
    wrong.write_text(json.dumps(config), encoding="utf-8")
    started = time.monotonic()
    result = run(launch(pyz_file, wrong, namespace, "--timeout", "60", "--print", "json"))
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line or "retrying" in line]
    server = cluster["server"].removeprefix("https://")
    assert errors == [
        f"ring-launch: error: kubeconfig {wrong}: TLS to {server}: the server's certificate was refused: "
        "unable to get local issuer certificate"
    ]
    assert time.monotonic() - started < 30  # final at once, not retried to the 60 s deadline
