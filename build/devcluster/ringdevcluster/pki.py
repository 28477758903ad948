"""Certificates and kubeconfigs for the local control plane, via the openssl CLI.

Everything is signed by one throw-away CA per state directory. Keys are EC
P-256: generating one takes milliseconds (RSA takes far longer), which keeps a
warm ``up`` fast. Users are client certificates, as Kubernetes reads them:
the subject's CN is the user name and each O is a group, so
``O=system:masters`` makes the admin a cluster admin without any RBAC binding,
and a certificate with no groups authenticates a user RBAC knows nothing about.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

__all__ = ["PkiError", "Pki", "write_kubeconfig"]

_DAYS = "3650"


class PkiError(RuntimeError):
    """openssl is missing or failed; the message carries its output."""


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PkiError("the `openssl` command is needed to create the control plane's certificates; install openssl")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PkiError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _subject(cn: str, groups: Sequence[str]) -> str:
    for part in (cn, *groups):
        if any(c in part for c in "/=+,\\"):
            raise ValueError(f"unsupported character in certificate name {part!r}")
    return "".join(f"/O={g}" for g in groups) + f"/CN={cn}"


class Pki:
    """The CA and leaf certificates under one directory.

    Create the CA once with :meth:`init_ca`; then :meth:`issue` leaf
    certificates. Paths are deterministic (``<name>.crt`` / ``<name>.key``).
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    def _new_key(self, path: Path) -> None:
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
        path.chmod(0o600)

    def init_ca(self) -> None:
        """Create a fresh CA (overwriting any previous one)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._new_key(self.ca_key)
        _openssl(
            "req", "-x509", "-new", "-key", str(self.ca_key), "-out", str(self.ca_cert), "-days", _DAYS,
            "-subj", "/CN=ring-devcluster-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip

    def issue(
        self,
        name: str,
        *,
        cn: str,
        groups: Sequence[str] = (),
        server_names: Sequence[str] = (),
        server_ips: Sequence[str] = (),
    ) -> tuple[Path, Path]:
        """Issue ``<name>.crt``/``<name>.key`` signed by the CA; return their paths.

        A certificate with ``server_names``/``server_ips`` is a serving
        certificate (those become its SANs), otherwise a client certificate.
        """
        key, cert = self.key(name), self.cert(name)
        self._new_key(key)
        serving = bool(server_names or server_ips)
        ext_lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={'serverAuth' if serving else 'clientAuth'}",
        ]
        if serving:
            sans = [f"DNS:{n}" for n in server_names] + [f"IP:{ip}" for ip in server_ips]
            ext_lines.append("subjectAltName=" + ",".join(sans))
        with tempfile.TemporaryDirectory() as tmp:
            csr = Path(tmp) / "req.csr"
            ext = Path(tmp) / "ext.cnf"
            ext.write_text("\n".join(ext_lines) + "\n")
            _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", _subject(cn, groups))
            _openssl(
                "x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
                "-set_serial", f"0x{secrets.token_hex(15)}", "-out", str(cert), "-days", _DAYS, "-extfile", str(ext),
            )  # fmt: skip
        return cert, key

    def service_account_keys(self) -> tuple[Path, Path]:
        """Create the service-account token signing key pair: ``(private, public)``."""
        private, public = self.dir / "sa.key", self.dir / "sa.pub"
        self._new_key(private)
        _openssl("pkey", "-in", str(private), "-pubout", "-out", str(public))
        return private, public


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, *, server: str, ca_cert: Path, client_cert: Path, client_key: Path, user: str) -> Path:
    """Write a self-contained kubeconfig (certificates embedded) and return ``path``.

    Embedding keeps the file valid when copied elsewhere; the file is written
    with mode 0600 because it holds a private key.
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "ring-devcluster", "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)},
            }
        ],
        "contexts": [{"name": "ring-devcluster", "context": {"cluster": "ring-devcluster", "user": user}}],
        "current-context": "ring-devcluster",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
