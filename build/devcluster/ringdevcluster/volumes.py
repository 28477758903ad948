"""A ConfigMap volume the way the kubelet keeps one, for kwok pods.

kwok runs no kubelet, so nothing projects a pod's ConfigMap volume into a
directory. Tests and the demo use this projector instead: it watches one
ConfigMap and writes its data with the kubelet's atomic-writer layout::

    DIR/..2026_11_29_23_50_00.123456789/cluster.json   (a fresh directory per update)
    DIR/..data -> ..2026_11_29_23_50_00.123456789       (swapped by rename)
    DIR/cluster.json -> ..data/cluster.json             (stable user-visible links)

so a reader following ``DIR/cluster.json`` always sees one complete version.
``delay`` emulates the kubelet's sync period (up to a minute or two in real
clusters; 0 here unless a test wants it).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import threading
import time
from pathlib import Path

from kubernetes import client, config, watch


def write_atomic(directory: Path, data: dict[str, str]) -> None:
    """Publish ``data`` in ``directory`` with the kubelet's ``..data`` swap."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    version = directory / stamp
    version.mkdir()
    for name, text in data.items():
        (version / name).write_text(text)
    tmp = directory / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    os.symlink(stamp, tmp)
    data_link = directory / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    os.rename(tmp, data_link)
    for name in data:
        link = directory / name
        if not link.is_symlink():
            os.symlink(f"..data/{name}", link)
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in data:
            entry.unlink()  # a key removed from the ConfigMap
    if old and old != stamp:
        shutil.rmtree(directory / old, ignore_errors=True)


class ConfigMapVolume:
    """Keeps ``directory`` in step with ConfigMap ``namespace/name`` from a thread.

    ``start()`` begins watching; ``stop()`` ends it. Until the ConfigMap
    exists the directory is empty, as a kubelet would leave the pod pending.
    """

    def __init__(self, *, kubeconfig: str, namespace: str, name: str, directory: Path, delay: float = 0.0) -> None:
        self.namespace, self.name, self.directory, self.delay = namespace, name, directory, delay
        self._api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"volume-{name}", daemon=True)
        self.updates = 0

    def start(self) -> ConfigMapVolume:
        """Start projecting; returns self."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop projecting (the directory stays as it is)."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        last: dict[str, str] | None = None
        while not self._stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in w.stream(  # type: ignore[no-untyped-call]
                    self._api.list_namespaced_config_map,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=5,
                ):
                    if self._stop.is_set():
                        break
                    if event["type"] == "DELETED":
                        continue
                    data = dict(event["object"].data or {})
                    if data != last:
                        if self.delay:
                            time.sleep(self.delay)
                        write_atomic(self.directory, data)
                        last = data
                        self.updates += 1
            except Exception:  # noqa: BLE001 - a kubelet keeps retrying too
                time.sleep(0.5)
            finally:
                w.stop()  # type: ignore[no-untyped-call]
