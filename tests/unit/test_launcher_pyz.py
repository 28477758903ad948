"""The one-file launcher (``dist/ring-launch.pyz``) and its standard-library API configuration.

The pyz is built by the real builder into a temporary directory and run as a
real process with ``python3 -I -S``: isolated (no ``PYTHONPATH``, no user
site) and without ``site`` (no site-packages at all), so any import outside
the standard library fails here, whatever the import-linter contract says.
Running it on Python 3.9 and 3.13 is tests/integration/test_launcher_pythons.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from ranktable.clusterspec import STATUS_INITIALIZING, spec_to_json
from ranktable.launch import exitcodes, wait
from ranktable.launch.kubeconfig import ApiConfigError, YamlError, in_cluster_config, kubeconfig_config, parse_yaml
from ranktable.launch.wait import FileSource, observation_from_configmap
from ranktable.stored import compress
from ranktable.tfconfig import tf_config
from tests.support import launcherpyz
from tests.support.kubeletdir import KubeletDir
from tests.support.launcherpyz import HEAVY
from tests.support.loopback import TLS, Loopback
from tests.support.specs import make_spec

POD = "job-worker-1"


@pytest.fixture(scope="module")
def pyz_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return launcherpyz.build(tmp_path_factory.mktemp("dist") / "ring-launch.pyz")


@pytest.fixture
def volume(tmp_path: Path) -> KubeletDir:
    root = tmp_path / "ring-config"
    root.mkdir()
    return KubeletDir(root)


def run_pyz(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "POD_NAME": POD}
    return subprocess.run(
        [sys.executable, "-I", "-S", str(path), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


# The file itself ------------------------------------------------------------------------


def test_pyz_is_a_zipapp_of_the_launcher_and_reproducible(pyz_file: Path, tmp_path: Path) -> None:
    data = pyz_file.read_bytes()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(pyz_file) as archive:
        names = archive.namelist()
    assert (
        "__main__.py" in names and "ranktable/launch/launcher.py" in names and "ranktable/launch/apiwatch.py" in names
    )
    # Bytecode for the building Python beside each source; other versions compile the source.
    assert sorted(n for n in names if n.endswith(".pyc")) == sorted(
        n + "c" for n in names if n.startswith("ranktable/") and n.endswith(".py")
    )
    assert launcherpyz.build(tmp_path / "again.pyz").read_bytes() == data


def test_pyz_prints_tf_config_with_no_site_packages(pyz_file: Path, volume: KubeletDir) -> None:
    spec = make_spec([("worker", 3)])
    volume.publish_spec(spec)
    result = run_pyz(pyz_file, "--config-dir", str(volume.root), "--timeout", "10", "--print", "json")
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)
    assert json.loads(env["TF_CONFIG"]) == tf_config(spec, pod=POD)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3"


def test_pyz_imports_every_module_with_no_site_packages(pyz_file: Path) -> None:
    # Lazily imported modules (apiwatch, kubeapi, supervise) are not reached by
    # --print: import each one so none can hide a third-party import.
    probe = (
        "import sys, zipfile, importlib; sys.path.insert(0, sys.argv[1]);"
        "names = [n[:-3].replace('/', '.') for n in zipfile.ZipFile(sys.argv[1]).namelist()"
        " if n.startswith('ranktable/') and n.endswith('.py')];"
        "[importlib.import_module(n.replace('.__init__', '')) for n in names]; print(len(names))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(pyz_file)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 20


def test_a_damaged_member_exits_66_in_one_line(pyz_file: Path, tmp_path: Path) -> None:
    data = bytearray(pyz_file.read_bytes())
    with zipfile.ZipFile(pyz_file) as archive:
        infos = [archive.getinfo(name) for name in ("ranktable/launch/launcher.py", "ranktable/launch/launcher.pyc")]
    for info in infos:  # flip bytes inside the member's compressed data (past its local header)
        start = len(launcherpyz.builder().SHEBANG) + info.header_offset + 30 + len(info.filename) + 40
        for i in range(start, start + 64):
            data[i] ^= 0xFF
    damaged = tmp_path / "ring-launch.pyz"
    damaged.write_bytes(bytes(data))
    result = run_pyz(damaged, "--print", "json")
    assert result.returncode == exitcodes.DAMAGED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is damaged or incomplete" in lines[0] and str(damaged) in lines[0], result.stderr


def test_python_older_than_3_9_exits_69_in_one_line(pyz_file: Path) -> None:
    # The entry's check, under an interpreter that reports 3.8.
    probe = (
        "import runpy, sys; sys.version_info = (3, 8, 10, 'final', 0); sys.argv = ['x']; runpy.run_path(sys.argv_pyz)"
    )
    probe = probe.replace("sys.argv_pyz", repr(str(pyz_file)))
    result = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=30)
    assert result.returncode == exitcodes.OLD_PYTHON
    assert (
        result.stderr.strip()
        == f"ring-launch: needs Python 3.9 or newer; {sys.executable} is Python {sys.version.split()[0]}"
    )


def test_install_copies_the_verified_file_atomically(pyz_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "ring"
    result = run_pyz(pyz_file, "--install", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "ring-launch.pyz").read_bytes() == pyz_file.read_bytes()
    assert os.access(target / "ring-launch.pyz", os.X_OK)
    assert sorted(p.name for p in target.iterdir()) == ["ring-launch.pyz"]
    assert f"installed {target / 'ring-launch.pyz'}" in result.stderr


def test_install_refuses_outside_the_pyz() -> None:
    from ranktable.launch.launcher import main

    assert main(["--install", "/nonexistent"]) == exitcodes.USAGE


# API configuration on the standard library ------------------------------------------------


KUBECONFIGS = {
    "devcluster": {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "QQ=="}}
        ],
        "users": [{"name": "u", "user": {"client-certificate-data": "Qg==", "client-key-data": "Qw=="}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "ctx",
        "preferences": {},
    },
    "quoted-and-lists": {
        "a": "it's: quoted # not a comment",
        "b": ["x", 'y "z"', "", None, True, 42],
        "nested": {"deep": [{"k": "v", "l": [1, 2]}, {"m": {}}], "e": []},
        "colon:key": "v",
        "unicode": "é ☃",
    },
}


@pytest.mark.parametrize("doc", KUBECONFIGS.values(), ids=KUBECONFIGS.keys())
@pytest.mark.parametrize("flow", [False], ids=["block"])
def test_yaml_reader_agrees_with_pyyaml_on_block_style(doc: dict[str, object], flow: bool) -> None:
    for text in (
        yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow),
        yaml.safe_dump(doc, sort_keys=True, indent=4, allow_unicode=True),
        "# a comment\n---\n" + yaml.safe_dump(doc),
    ):
        assert parse_yaml(text) == yaml.safe_load(text), text


def test_yaml_reader_reads_kubectl_layout_and_refuses_what_it_cannot() -> None:
    text = """apiVersion: v1
clusters:
- cluster:
    server: "https://[fd00::1]:6443"   # comment
    insecure-skip-tls-verify: true
  name: v6
contexts:
- context:
    cluster: v6
    user: t
  name: c
current-context: c
users:
- name: t
  user:
    token: 'abc''def'
"""
    assert parse_yaml(text) == yaml.safe_load(text)
    for bad in ("a: &anchor 1\n", "a: {b: 1}\n", "a: 1\na: 2\n", "a:\n\tb: 1\n"):  # more: test_kubeconfig_yaml.py
        with pytest.raises(YamlError, match=r"^line \d+: "):
            parse_yaml(bad)


def test_kubeconfig_forms(tmp_path: Path) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.crt").write_text(pem)
    (tmp_path / "token").write_text("tok-1\n")
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://[fd00::1]:6443", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    config = kubeconfig_config(str(path))
    assert (config.host, config.port, config.authority) == ("fd00::1", 6443, "[fd00::1]:6443")
    assert config.ca_file == str(tmp_path / "ca.crt")
    assert config.bearer() == "tok-1"
    (tmp_path / "token").write_text("tok-2\n")  # rotated in place: read again for the next request
    assert config.bearer() == "tok-2"

    doc["users"] = [{"name": "u", "user": {"client-certificate-data": base64.b64encode(pem.encode()).decode()}}]
    path.write_text(json.dumps(doc))
    with pytest.raises(ApiConfigError, match="needs both client-certificate and client-key"):
        kubeconfig_config(str(path))
    doc["users"] = [{"name": "u", "user": {"exec": {"command": "gke-gcloud-auth-plugin"}}}]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ApiConfigError, match="authenticates through 'exec'"):
        kubeconfig_config(str(path))


@pytest.mark.parametrize(
    ("host", "port", "authority"),
    [("10.96.0.1", "443", "10.96.0.1:443"), ("fd00:10:96::1", "6443", "[fd00:10:96::1]:6443")],
    ids=["ipv4", "ipv6"],
)
def test_in_cluster_config(tmp_path: Path, host: str, port: str, authority: str) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("ca")
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    config = in_cluster_config(env, service_account_dir=str(tmp_path))
    assert (config.host, config.port, config.authority) == (host, int(port), authority)
    assert config.bearer() == "sa-token" and config.ca_file == str(tmp_path / "ca.crt")


@pytest.mark.parametrize("missing", ["token", "ca.crt"])
def test_in_cluster_config_names_the_missing_file(tmp_path: Path, missing: str) -> None:
    for name in ("token", "ca.crt"):
        if name != missing:
            (tmp_path / name).write_text("x")
    with pytest.raises(ApiConfigError, match=f"at {tmp_path / missing}, which is missing"):
        in_cluster_config({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, service_account_dir=str(tmp_path))


def test_api_mode_without_any_configuration_exits_78(pyz_file: Path, tmp_path: Path) -> None:
    result = run_pyz(
        pyz_file,
        "--from-api",
        "--namespace",
        "ns",
        "--configmap",
        "cm",
        "--print",
        "json",
        env={"HOME": str(tmp_path)},
    )
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("ring-launch: error: not in a pod")


def tls_kubeconfig(tmp_path: Path, port: int, ca: Path) -> Path:
    """A kubeconfig (JSON) for ``https://localhost:PORT`` that trusts ``ca`` and sends a token."""
    doc = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {"name": "k", "cluster": {"server": f"https://localhost:{port}", "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    return path


def test_an_expired_server_certificate_exits_78_in_one_line_from_the_early_registration(
    pyz_file: Path, tmp_path: Path
) -> None:
    server = Loopback(lambda _request: None, cert="expired")
    try:
        config = tls_kubeconfig(tmp_path, server.port, TLS / "expired-ca.crt")
        args = ["--from-api", "--register", "--kubeconfig", str(config), "--namespace", "ns", "--configmap", "cm"]
        result = run_pyz(pyz_file, *args, "--timeout", "60", "--print", "json", env={"POD_IP": "10.0.0.7"})
        assert result.returncode == exitcodes.API_CONFIG, result.stderr
        assert result.stderr.splitlines() == [
            f"ring-launch: error: kubeconfig {config}: TLS to localhost:{server.port}: the server's certificate "
            "was refused: certificate has expired"
        ]
        assert server.requests == []  # the early PATCH never went out, nor main's
    finally:
        server.close()


def test_a_python_without_ssl_exits_78_in_one_line(pyz_file: Path, tmp_path: Path) -> None:
    config = tls_kubeconfig(tmp_path, 1, TLS / "ca.crt")
    argv = [str(pyz_file), "--from-api", "--register", "--kubeconfig", str(config), "--namespace", "ns"]
    argv += ["--configmap", "cm", "--print", "json"]
    probe = (  # as on a Python built without OpenSSL: import ssl raises ImportError
        f"import runpy, sys; sys.modules['ssl'] = None; sys.argv = {argv!r}; "
        f"runpy.run_path({str(pyz_file)!r}, run_name='__main__')"
    )
    env = {"PATH": os.environ["PATH"], "POD_NAME": POD, "POD_IP": "10.0.0.7"}
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == exitcodes.API_CONFIG, result.stderr
    assert result.stderr.splitlines() == [
        f"ring-launch: error: kubeconfig {config}: this Python cannot speak TLS to the API server: its ssl module "
        "does not load (import of ssl halted; None in sys.modules)"
    ]


# Reading the spec: one place for files and ConfigMaps --------------------------------------


def test_configmap_data_and_binary_data_read_alike() -> None:
    text = spec_to_json(make_spec([("worker", 2)]))
    plain = observation_from_configmap({"data": {"cluster.json": text}})
    packed = base64.b64encode(compress(text)).decode()
    binary = observation_from_configmap({"binaryData": {"cluster.json.gz": packed}})
    assert plain == binary and plain.cluster == text and plain.final
    broken = observation_from_configmap({"binaryData": {"cluster.json.gz": "not base64!"}})
    assert broken.cluster is None and broken.error is not None and "not base64" in broken.error
    assert observation_from_configmap(None).cluster is None


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "signature-poll"])
def test_file_source_sees_a_kubelet_swap_without_waiting_for_the_poll_interval(
    volume: KubeletDir, monkeypatch: pytest.MonkeyPatch, inotify: bool
) -> None:
    if not inotify:
        monkeypatch.setattr(wait._DirectoryWatch, "open", classmethod(lambda cls, directory: None))
    volume.publish_spec(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={0}))
    source = FileSource(str(volume.root), interval=3600.0)  # only the signature check can notice
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        for obs in source.observe(time.monotonic() + 30):
            seen.append(obs.cluster or "")
            if '"completed"' in (obs.cluster or ""):
                done.set()
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    while not seen:
        time.sleep(0.01)
    volume.publish_spec(make_spec([("worker", 2)]))
    assert done.wait(10), seen
    assert len(seen) == 2  # one read at start, one for the swap: no reads in between


#: File mode needs no HTTP or TLS client at all (API mode loads these: tests/integration/test_launcher_api.py).
API_CLIENT = ("http.client", "ssl", "_ssl", "email", "ranktable.launch.kubeapi", "ranktable.launch.earlyreg")


def imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reported loading."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_file_mode_start_imports_none_of_the_heavy_modules(pyz_file: Path, volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 2)], devices=2))
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-I", "-S", str(pyz_file), "--config-dir", str(volume.root)]
        + ["--pod", POD, "--timeout", "5", "--print", "json"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = imported(result.stderr)
    assert "ranktable.launch.launcher" in loaded and json.loads(result.stdout)["RANK"] == "1"
    assert sorted(loaded & {*HEAVY, *API_CLIENT}) == []
