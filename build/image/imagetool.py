"""Helpers for build/image.sh: lock files, input digests, apt mirrors, runc bundles.

A build tool, not part of the product: standard library only, run by any
Python 3.8+ on the build host. Each subcommand does one small thing that is
awkward in shell:

    lock OUT --pip PIP -- REQUIREMENT...   pin REQUIREMENTs (a wheel path and
                                          specifiers) with sha256 hashes, for
                                          pip install --require-hashes
    digest PATH...                         one sha256 over files and wheels;
                                          a wheel counts by its members' names
                                          and contents (not zip timestamps), so
                                          an unchanged rebuild keys the same
    mirrors SUITE                          one-line apt sources for SUITE and
                                          its -updates/-security suites, from
                                          the host's /etc/apt configuration
    bundle CONFIG --tmpfs DIR -- ARG...    make umoci's runtime spec run ARGs
                                          the way build/ring-controller.yaml
                                          does: read-only root, no capabilities,
                                          no new privileges, tmpfs on DIR
    pycache ROOT PREFIX...                 .py files under ROOT/PREFIX without
                                          bytecode (printed; exit 1 if any)
    repotags ARCHIVE                       the RepoTags of a docker-archive
    layers LAYOUT TAG                      the blob files of TAG's layers
    oci LAYOUT TAG --layer TAR ... [config] write an image into an OCI layout:
                                          uncompressed layers hardlinked in as
                                          blobs (no minutes of gzip for a 2 GB
                                          TensorFlow layer), config and
                                          manifest, TAG in index.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PRODUCT = "ring-controller"


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def cmd_lock(args: argparse.Namespace) -> int:
    """Resolve the requirements with pip (metadata only) and write name==version lines."""
    found = subprocess.run(
        [args.pip_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if found != args.python_version:
        # pip resolves for the interpreter it runs in (markers, wheel tags).
        sys.exit(f"lock: {args.pip_python} is Python {found}; the images have {args.python_version}")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                args.pip_python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--dry-run",
                "--ignore-installed",
                "--only-binary=:all:",
                "--report",
                str(report),
                *args.requirements,
            ],
            check=True,
        )
        installs = json.loads(report.read_text())["install"]
    lines = []
    for item in sorted(installs, key=lambda i: _norm(i["metadata"]["name"])):
        name = item["metadata"]["name"]
        if _norm(name) == PRODUCT:
            continue  # installed from the fresh wheel, in a layer of its own
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{_norm(name)}=={item['metadata']['version']} --hash=sha256:{digest}")
    header = (
        f"# Written by `build/image.sh --lock` (pip resolution of {', '.join(Path(r).name for r in args.requirements)}).\n"
        "# The runtime dependencies of this image, pinned with hashes; the product wheel\n"
        "# itself is installed on top with --no-deps. Edit setup.cfg or image.conf, then\n"
        "# regenerate; do not edit by hand.\n"
    )
    Path(args.out).write_text(header + "\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines)} packages", file=sys.stderr)
    return 0


def _digest_wheel(path: Path, h: hashlib._Hash) -> None:
    with zipfile.ZipFile(path) as whl:
        for info in sorted(whl.infolist(), key=lambda i: i.filename):
            h.update(info.filename.encode() + b"\0")
            h.update(hashlib.sha256(whl.read(info)).digest())


def cmd_digest(args: argparse.Namespace) -> int:
    h = hashlib.sha256()
    for name in args.paths:
        path = Path(name)
        h.update(path.name.encode() + b"\0")
        if path.suffix == ".whl":
            _digest_wheel(path, h)
        else:
            h.update(hashlib.sha256(path.read_bytes()).digest())
    print(h.hexdigest())
    return 0


def _sources(root: Path) -> list[tuple[list[str], list[str], list[str]]]:
    """(uris, suites, components) of every enabled deb source on the host."""
    found: list[tuple[list[str], list[str], list[str]]] = []
    lists = [root / "sources.list", *sorted((root / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb":
                if words[1].startswith("["):  # options: [arch=amd64 signed-by=...]
                    while words and not words[0].endswith("]"):
                        words.pop(0)
                    words.pop(0)
                    words.insert(0, "deb")
                found.append(([words[1]], [words[2]], words[3:]))
    for path in sorted((root / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                continue
            found.append(
                (
                    fields.get("uris", "").split(),
                    fields.get("suites", "").split(),
                    fields.get("components", "main").split(),
                )
            )
    return found


def cmd_mirrors(args: argparse.Namespace) -> int:
    wanted = {args.suite, f"{args.suite}-updates", f"{args.suite}-security"}
    lines = []
    for uris, suites, _components in _sources(Path(args.root)):
        for uri in uris:
            for suite in suites:
                if suite in wanted:
                    line = f"deb {uri} {suite} main"
                    if line not in lines:
                        lines.append(line)
    if not any(line.split()[2] == args.suite for line in lines):
        lines.insert(0, f"deb http://deb.debian.org/debian {args.suite} main")
    print("\n".join(lines))
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    path = Path(args.config)
    spec = json.loads(path.read_text())
    spec["root"]["readonly"] = True
    proc = spec["process"]
    proc["terminal"] = False
    proc["args"] = args.args
    proc["noNewPrivileges"] = True
    proc["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
    proc.pop("rlimits", None)
    for tmpfs in args.tmpfs:
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != tmpfs]
        spec["mounts"].append(
            {
                "destination": tmpfs,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=64m"],
            }
        )
    path.write_text(json.dumps(spec, indent=2))
    print(f"{proc['user']['uid']}:{proc['user']['gid']}")
    return 0


def cmd_pycache(args: argparse.Namespace) -> int:
    tag = sys.implementation.cache_tag if args.tag is None else args.tag
    missing = []
    for prefix in args.prefixes:
        base = Path(args.root) / prefix.lstrip("/")
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(".py"):
                    pyc = Path(dirpath) / "__pycache__" / f"{name[:-3]}.{tag}.pyc"
                    if not pyc.exists():
                        missing.append(str(Path(dirpath, name).relative_to(args.root)))
    for name in missing:
        print(name)
    return 1 if missing else 0


def cmd_repotags(args: argparse.Namespace) -> int:
    with tarfile.open(args.archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        manifest = json.load(member)
    for entry in manifest:
        for tag in entry.get("RepoTags") or []:
            print(tag)
    return 0


def _sha256_file(path: Path) -> str:
    """sha256 of a file, remembered beside it (PATH.sha256) while its mtime and size hold."""
    memo = path.with_name(path.name + ".sha256")
    stat = path.stat()
    stamp = f"{stat.st_mtime_ns} {stat.st_size}"
    if memo.is_file():
        saved = memo.read_text().split()
        if len(saved) == 3 and " ".join(saved[1:]) == stamp:
            return saved[0]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    memo.write_text(f"{h.hexdigest()} {stamp}\n")
    return h.hexdigest()


def _put_blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    if not path.exists():
        path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def cmd_oci(args: argparse.Namespace) -> int:
    layout = Path(args.layout)
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    layers, diff_ids, history = [], [], []
    for spec in args.layer:
        tar, _, created_by = spec.partition("=")
        path = Path(tar)
        digest = _sha256_file(path)
        blob = layout / "blobs" / "sha256" / digest
        if not blob.exists():
            try:
                os.link(path, blob)
            except OSError:
                shutil.copyfile(path, blob)
        layers.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": f"sha256:{digest}",
                "size": path.stat().st_size,
            }
        )
        diff_ids.append(f"sha256:{digest}")
        history.append({"created": args.created, "created_by": created_by})
    config: dict[str, object] = {"User": args.user, "Env": args.env, "WorkingDir": args.workdir}
    if args.entrypoint:
        config["Entrypoint"] = args.entrypoint
    if args.cmd:
        config["Cmd"] = args.cmd
    if args.expose:
        config["ExposedPorts"] = {port: {} for port in args.expose}
    config["Labels"] = dict(label.split("=", 1) for label in args.label)
    image = {
        "created": args.created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_desc = _put_blob(layout, json.dumps(image, indent=2).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
        "layers": layers,
    }
    manifest_desc = _put_blob(layout, json.dumps(manifest, indent=2).encode())
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    ref = "org.opencontainers.image.ref.name"
    index["manifests"] = [m for m in index["manifests"] if m.get("annotations", {}).get(ref) not in args.tag]
    for tag in args.tag:
        index["manifests"].append(
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc, "annotations": {ref: tag}}
        )
    tmp = index_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=2))
    tmp.replace(index_path)
    size = config_desc["size"] + sum(int(layer["size"]) for layer in layers)  # type: ignore[call-overload]
    print(f"{size / 2**20:.0f}M")
    return 0


def cmd_layers(args: argparse.Namespace) -> int:
    """The blob paths of TAG's layers, bottom first."""
    layout = Path(args.layout)
    ref = "org.opencontainers.image.ref.name"
    index = json.loads((layout / "index.json").read_text())
    (desc,) = [m for m in index["manifests"] if m.get("annotations", {}).get(ref) == args.tag]
    manifest = json.loads((layout / "blobs" / desc["digest"].replace(":", "/")).read_text())
    for layer in manifest["layers"]:
        if layer["mediaType"] != "application/vnd.oci.image.layer.v1.tar":
            sys.exit(f"layers: {layer['mediaType']} is not an uncompressed layer")
        print(layout / "blobs" / layer["digest"].replace(":", "/"))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("lock")
    p.add_argument("out")
    p.add_argument("--pip-python", default=sys.executable)
    p.add_argument("--python-version", default="3.11")
    p.add_argument("requirements", nargs="+")
    p.set_defaults(func=cmd_lock)
    p = sub.add_parser("digest")
    p.add_argument("paths", nargs="+")
    p.set_defaults(func=cmd_digest)
    p = sub.add_parser("mirrors")
    p.add_argument("suite")
    p.add_argument("--root", default="/etc/apt")
    p.set_defaults(func=cmd_mirrors)
    p = sub.add_parser("bundle")
    p.add_argument("config")
    p.add_argument("--tmpfs", action="append", default=[])
    p.add_argument("args", nargs="+")
    p.set_defaults(func=cmd_bundle)
    p = sub.add_parser("pycache")
    p.add_argument("root")
    p.add_argument("prefixes", nargs="+")
    p.add_argument("--tag", default="cpython-311")
    p.set_defaults(func=cmd_pycache)
    p = sub.add_parser("repotags")
    p.add_argument("archive")
    p.set_defaults(func=cmd_repotags)
    p = sub.add_parser("oci")
    p.add_argument("layout")
    p.add_argument("tag", nargs="+")
    p.add_argument("--layer", action="append", required=True, help="TAR=created_by")
    p.add_argument("--user", required=True)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--entrypoint", type=json.loads, default=None)
    p.add_argument("--cmd", type=json.loads, default=None)
    p.add_argument("--workdir", default="/")
    p.add_argument("--expose", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--created", default="1970-01-01T00:00:00Z")
    p.set_defaults(func=cmd_oci)
    p = sub.add_parser("layers")
    p.add_argument("layout")
    p.add_argument("tag")
    p.set_defaults(func=cmd_layers)
    args = parser.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
