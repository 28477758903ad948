"""A chained CNI plugin that writes a pod's ``k8s.v1.cni.cncf.io/network-status`` annotation.

The dev cluster's second pod network (``ring-devcluster up --with node
--second-network``) is a second CNI network configuration beside the first:
containerd attaches every pod of the real node to each configuration it
loads (``max_conf_num``), as ``eth0``, ``eth1``, ... The second one's chain
is ``bridge`` (bridge ``ringbr1``) + ``host-local``, then this plugin, which
does what Multus does for its secondary networks: it writes the pod's
network-status annotation in the Network Plumbing Working Group's format
(multi-network specification v1.2, section 4.1.2), a JSON list of
``{"name", "interface", "ips", "mac", "default", "dns"}``. Its entries: the
cluster network (``eth0``, ``"default": true``, read in the pod's network
namespace) and this network (``CNI_IFNAME``, its addresses from the previous
plugin's result, named by the plugin configuration's ``network``).

A CNI plugin (CNI specification 1.0): configuration on stdin (with
``prevResult``), the command in ``CNI_COMMAND``, the pod in ``CNI_ARGS``
(``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``, as containerd passes them). ADD
patches the pod through the API server (client certificate named by the
configuration) and prints the previous result unchanged; DEL and CHECK do
nothing; VERSION prints the versions. A failed ADD prints a CNI error and
exits 1: the kubelet then retries the sandbox, and no pod runs without its
annotation. Standard library only: it runs as a script
(``python3 netstatus.py``) with the interpreter ``ring-devcluster`` runs on.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import urllib.parse
from typing import Any

__all__ = ["ANNOTATION", "CNI_VERSIONS", "PLUGIN_TYPE", "main", "network_status"]

#: The annotation Multus writes and ring-controller reads (``ring-controller.io/network``).
ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: The plugin's ``type`` in a CNI configuration: the file name in the CNI bin directory.
PLUGIN_TYPE = "ring-network-status"
CNI_VERSIONS = ("0.4.0", "1.0.0")

Json = dict[str, Any]


class PluginError(RuntimeError):
    """ADD cannot write the annotation; the message goes into the CNI error result."""


def _entry(name: str, interface: str, ips: list[str], mac: str, *, default: bool) -> Json:
    return {"name": name, "interface": interface, "ips": ips, "mac": mac, "default": default, "dns": {}}


def network_status(*, config: Json, ifname: str, default_ips: list[str], default_mac: str) -> list[Json]:
    """The annotation's entries for a pod: its cluster network, then this plugin's network.

    ``config`` is the plugin's configuration with ``prevResult`` (the
    ``bridge`` plugin's result for interface ``ifname``); ``default_ips`` and
    ``default_mac`` are the pod's addresses and MAC on its cluster network
    interface (``defaultInterface``, default ``eth0``).
    """
    ips, mac = _attached(config, ifname)
    return [
        _entry(str(config.get("defaultNetwork", "")), str(config.get("defaultInterface", "eth0")), default_ips,
               default_mac, default=True),
        _entry(str(config["network"]), ifname, ips, mac, default=False),
    ]  # fmt: skip


def _attached(config: Json, ifname: str) -> tuple[list[str], str]:
    """The addresses (without prefix) and MAC of ``ifname`` in the previous plugin's result; PluginError if none."""
    result = config.get("prevResult") or {}
    interfaces = result.get("interfaces") or []
    ips = []
    mac = ""
    for ip in result.get("ips") or []:
        index = ip.get("interface")
        if isinstance(index, int) and 0 <= index < len(interfaces) and interfaces[index].get("name") == ifname:
            ips.append(str(ip["address"]).split("/", 1)[0])
            mac = str(interfaces[index].get("mac", ""))
    if not ips:
        raise PluginError(f"the previous result has no address on {ifname}: {json.dumps(result)[:300]}")
    return ips, mac


def _pod_interface(netns: str, name: str) -> tuple[list[str], str]:
    """The global addresses and MAC of interface ``name`` in network namespace ``netns`` (a path)."""
    proc = subprocess.run(
        ["nsenter", f"--net={netns}", "ip", "-j", "addr", "show", "dev", name],
        capture_output=True, text=True, check=False, timeout=10,
    )  # fmt: skip
    if proc.returncode != 0:
        raise PluginError(f"cannot read {name} in {netns}: {proc.stderr.strip()}")
    (link,) = json.loads(proc.stdout)
    ips = [a["local"] for a in link.get("addr_info", []) if a.get("scope") == "global"]
    return ips, str(link.get("address", ""))


def _cni_args(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(";") if "=" in pair)


def _patch_pod(config: Json, namespace: str, pod: str, value: str) -> None:
    server = urllib.parse.urlsplit(str(config["server"]))
    context = ssl.create_default_context(cafile=str(config["ca"]))
    context.load_cert_chain(str(config["cert"]), str(config["key"]))
    conn = http.client.HTTPSConnection(server.hostname or "", server.port or 443, context=context, timeout=15)
    body = json.dumps({"metadata": {"annotations": {ANNOTATION: value}}})
    try:
        conn.request(
            "PATCH",
            f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(pod)}",
            body=body,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        resp = conn.getresponse()
        text = resp.read(2000).decode(errors="replace")
    finally:
        conn.close()
    if resp.status != 200:
        raise PluginError(f"PATCH pod {namespace}/{pod}: HTTP {resp.status}: {text}")


def _add(config: Json, env: dict[str, str]) -> Json:
    args = _cni_args(env.get("CNI_ARGS", ""))
    namespace, pod = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    result: Json = dict(config.get("prevResult") or {})
    result["cniVersion"] = config.get("cniVersion", "1.0.0")
    if not namespace or not pod:
        return result  # not a Kubernetes pod (ctr run, a test): nothing to annotate
    _attached(config, env["CNI_IFNAME"])  # the bridge gave this interface an address, or fail now
    default_ips, default_mac = _pod_interface(env["CNI_NETNS"], str(config.get("defaultInterface", "eth0")))
    entries = network_status(config=config, ifname=env["CNI_IFNAME"], default_ips=default_ips, default_mac=default_mac)
    _patch_pod(config, namespace, pod, json.dumps(entries))
    return result


def main(stdin: str, env: dict[str, str]) -> tuple[int, str]:
    """Run one CNI command: ``(exit code, stdout)`` for configuration ``stdin`` and environment ``env``."""
    command = env.get("CNI_COMMAND", "")
    if command == "VERSION":
        return 0, json.dumps({"cniVersion": CNI_VERSIONS[-1], "supportedVersions": list(CNI_VERSIONS)})
    try:
        config = json.loads(stdin or "{}")
    except ValueError as err:
        return 1, json.dumps({"cniVersion": CNI_VERSIONS[-1], "code": 6, "msg": f"bad configuration: {err}"})
    if command != "ADD":
        return 0, ""  # DEL, CHECK, GC, STATUS: nothing of ours to remove or check
    try:
        return 0, json.dumps(_add(config, env))
    except (PluginError, OSError, KeyError, ValueError, subprocess.SubprocessError) as err:
        version = config.get("cniVersion", CNI_VERSIONS[-1])
        return 1, json.dumps({"cniVersion": version, "code": 999, "msg": f"{PLUGIN_TYPE}: {err}"})


if __name__ == "__main__":
    code, out = main(sys.stdin.read(), dict(os.environ))
    sys.stdout.write(out)
    sys.exit(code)
