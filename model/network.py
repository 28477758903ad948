"""Which address each member is reached at: IP family, secondary network, hostNetwork ports.

Three rules, each pure and on plain values (the agent applies them in
:func:`agent.decide.decide`; docs/jobs.md describes them for users):

* **IP family.** A pod has one IP per family in ``status.podIPs`` (one on
  single-stack clusters). A job's :data:`~model.keys.IP_FAMILY_ANNOTATION`
  (``IPv4`` or ``IPv6``) picks each member's address of that family; a member
  without one does not count (``ip_family``). Without the annotation each
  member's primary IP (``status.podIP``) is used, and a job whose members'
  primary IPs are of both families waits (``mixed_ip_families``): the members
  of one job never mix families.
* **Secondary network** (opt-in). A job's :data:`~model.keys.NETWORK_ANNOTATION`
  (``NAMESPACE/NAME``, or ``NAME`` in the job's namespace) names a Multus
  NetworkAttachmentDefinition. Each member's address is then its IP on that
  attachment, read from the pod annotation
  :data:`~model.keys.NETWORK_STATUS_ANNOTATION`, and the member's interface
  name on it goes into the spec too. The annotation's format is the Network
  Plumbing Working Group's "Kubernetes Network Custom Resource Definition
  De-facto Standard" (v1.2, section 4.1.2), which Multus writes: a JSON list
  of objects with ``name`` (``<namespace>/<name>`` of the attachment; the
  cluster network's entry carries its CNI network name and ``"default":
  true``), ``interface`` (the name inside the pod), ``ips`` (addresses, no
  prefix), ``mac``, ``default``, ``dns``. A member without the attachment, or
  without an address on it (of the job's family, if one is chosen), does not
  count; a malformed annotation is reported, never guessed through.
* **DRA-allocated NIC** (opt-in, instead of a Multus network). A job's
  :data:`~model.keys.NETWORK_CLAIM_ANNOTATION` names the pod's resource
  claim (its ``spec.resourceClaims[].name``); each member's address and
  interface are then those its DRA driver reports for the allocated device in
  the claim's ``status.devices[].networkData`` (``resource.k8s.io/v1``,
  Kubernetes 1.34 and later: ``interfaceName``, ``ips`` in CIDR notation such
  as ``192.0.2.5/24``, ``hardwareAddress``). The claim is looked up through
  the pod (``spec.resourceClaims[].resourceClaimName``, or
  ``status.resourceClaimStatuses`` for a claim made from a template); a member
  counts once its claim reports an address.
* **hostNetwork ports.** Members whose pods share an IP (``hostNetwork`` pods
  on one node) get distinct ports: in rank order, the k-th member on an IP
  (k from 0) listens on its own port plus k. A port the pod spec binds on the
  host (a named container port of a ``hostNetwork`` pod, which is a
  ``hostPort``) cannot move; when two members still end up on one
  ``ip:port`` the job is invalid (``address_collision``) and nothing is
  written.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from model.keys import IP_FAMILY_ANNOTATION, NETWORK_ANNOTATION, NETWORK_CLAIM_ANNOTATION, PORT_NAMES

#: The IP families, spelled as Kubernetes spells them (``spec.ipFamilies``).
Family = Literal["IPv4", "IPv6"]
FAMILIES: Final[tuple[Family, ...]] = ("IPv4", "IPv6")

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class AddressRule:
    """How a job's members are addressed: ``family`` None (each member's
    primary IP) or one of :data:`FAMILIES`; ``network`` None (the pod network)
    or the attachment's ``namespace/name``; ``claim`` None or the pod's
    resource claim (reference name) whose NIC carries the traffic."""

    family: Family | None = None
    network: str | None = None
    claim: str | None = None


@dataclass(frozen=True, slots=True)
class Attachment:
    """One entry of a pod's network-status annotation: the network's ``name``,
    the ``interface`` in the pod ("" when not given), its ``ips`` and whether
    it is the cluster network (``default``)."""

    name: str
    interface: str
    ips: tuple[str, ...]
    default: bool = False


@dataclass(frozen=True, slots=True)
class Reached:
    """Where a member is reached: ``ip`` and, on a secondary network, the ``interface`` it is on."""

    ip: str
    interface: str = ""


@dataclass(frozen=True, slots=True)
class Unreached:
    """Why a member has no address under the job's rule: ``state`` (a slot
    state of :mod:`agent.decide`), ``reason`` (the problem code) and a message."""

    state: Literal["wrong_family", "no_network", "invalid_network"]
    reason: str
    message: str


def family_of(ip: str) -> Family:
    """``IPv6`` when ``ip`` is an IPv6 address (it holds a colon), else ``IPv4``."""
    return "IPv6" if ":" in ip else "IPv4"


def parse_family(value: object) -> Family:
    """``value`` as an IP family (``ipv4``/``ipv6`` in any case); ValueError saying why not."""
    text = str(value).strip().lower()
    for family in FAMILIES:
        if text == family.lower():
            return family
    raise ValueError(f"{value!r} is not an IP family (IPv4 or IPv6)")


def parse_network(value: object, *, namespace: str) -> str:
    """``value`` as ``namespace/name`` of an attachment (a bare name is in ``namespace``); ValueError saying why not."""
    text = str(value).strip()
    parts = text.split("/")
    if len(parts) == 1:
        parts = [namespace, parts[0]]
    if len(parts) != 2 or not all(_dns_name(p) for p in parts):
        raise ValueError(f"{value!r} is not NAMESPACE/NAME (or NAME) of a network attachment")
    return "/".join(parts)


def _dns_name(part: str) -> bool:
    return 0 < len(part) <= 253 and part.isascii() and all(c.isalnum() or c in "-." for c in part)


def address_rule(annotations: dict[str, Any], *, namespace: str) -> tuple[AddressRule, str | None]:
    """The job's :class:`AddressRule` from its annotations, and why an annotation is malformed (None: both fine).

    A malformed annotation makes the job invalid (the caller reports it); the
    rule returned then holds only the well-formed half.
    """
    family: Family | None = None
    network: str | None = None
    errors = []
    if IP_FAMILY_ANNOTATION in annotations:
        try:
            family = parse_family(annotations[IP_FAMILY_ANNOTATION])
        except ValueError as e:
            errors.append(f"annotation {IP_FAMILY_ANNOTATION}: {e}")
    if NETWORK_ANNOTATION in annotations:
        try:
            network = parse_network(annotations[NETWORK_ANNOTATION], namespace=namespace)
        except ValueError as e:
            errors.append(f"annotation {NETWORK_ANNOTATION}: {e}")
    claim: str | None = None
    if NETWORK_CLAIM_ANNOTATION in annotations:
        claim = str(annotations[NETWORK_CLAIM_ANNOTATION]).strip()
        if not _dns_name(claim) or "." in claim:
            errors.append(f"annotation {NETWORK_CLAIM_ANNOTATION}: {claim!r} is not a pod resource claim name")
            claim = None
        elif NETWORK_ANNOTATION in annotations:
            errors.append(f"annotations {NETWORK_ANNOTATION} and {NETWORK_CLAIM_ANNOTATION}: choose one network")
            claim = network = None
    return AddressRule(family=family, network=network, claim=claim), "; ".join(errors) or None


def parse_network_status(text: str) -> tuple[Attachment, ...]:
    """The attachments in a network-status annotation; ValueError saying what is malformed.

    Strict where the address comes from (``name``, ``interface``, ``ips``
    must have their documented types; each IP must be an address, a
    ``/prefix`` is tolerated and dropped), lenient elsewhere (unknown keys and
    ``mac``/``dns``/``device-info`` are not read).
    """
    try:
        raw = json.loads(text)
    except ValueError:
        raise ValueError(f"not JSON: {text[:60]!r}") from None
    if not isinstance(raw, list):
        raise ValueError("not a JSON list of attachments")
    found = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ValueError(f"entry {i} is not an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"entry {i} has no string 'name'")
        interface = entry.get("interface", "")
        if not isinstance(interface, str):
            raise ValueError(f"entry {i} ({name}): 'interface' is not a string")
        ips_raw = entry.get("ips", [])
        if not isinstance(ips_raw, list) or not all(isinstance(ip, str) for ip in ips_raw):
            raise ValueError(f"entry {i} ({name}): 'ips' is not a list of strings")
        ips = []
        for ip in ips_raw:
            address = ip.split("/", 1)[0]
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"entry {i} ({name}): {ip!r} is not an IP address") from None
            ips.append(address)
        found.append(Attachment(name=name, interface=interface, ips=tuple(ips), default=entry.get("default") is True))
    return tuple(found)


#: Parsed network-status annotations by text (an error as its message): every
#: sync of a job re-reads the same texts until a pod changes. Bounded, cleared when full.
_PARSED: dict[str, tuple[Attachment, ...] | str] = {}
_PARSED_MAX = 16384


def _parsed(text: str) -> tuple[Attachment, ...] | str:
    found = _PARSED.get(text)
    if found is None:
        try:
            found = parse_network_status(text)
        except ValueError as e:
            found = str(e)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = found
    return found


def pod_claims(spec: Json, status: Json) -> tuple[tuple[str, str], ...]:
    """(reference name, ResourceClaim name) of each resource claim a pod uses, as far as known.

    A claim named in ``spec.resourceClaims[].resourceClaimName`` is known at
    once; one made from ``resourceClaimTemplateName`` is known when
    ``status.resourceClaimStatuses`` names it.
    """
    found: dict[str, str] = {}
    for ref in spec.get("resourceClaims") or ():
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("resourceClaimName"), str):
            found[ref["name"]] = ref["resourceClaimName"]
    for ref in status.get("resourceClaimStatuses") or ():
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("resourceClaimName"), str):
            found.setdefault(ref["name"], ref["resourceClaimName"])
    return tuple(sorted(found.items()))


def claim_attachments(raw: Json) -> tuple[Attachment, ...] | str:
    """The NICs a ResourceClaim's status reports (``status.devices[]`` with ``networkData``), or why malformed.

    Each becomes an :class:`Attachment` named ``driver/pool/device`` with the
    device's ``interfaceName`` and its ``ips`` without their prefix length.
    """
    found = []
    for i, device in enumerate((raw.get("status") or {}).get("devices") or ()):
        if not isinstance(device, dict) or not isinstance(device.get("networkData"), dict):
            continue
        data = device["networkData"]
        name = "/".join(str(device.get(k, "")) for k in ("driver", "pool", "device"))
        interface = data.get("interfaceName", "")
        ips_raw = data.get("ips", [])
        if not isinstance(interface, str) or not isinstance(ips_raw, list):
            return f"status.devices[{i}].networkData: interfaceName or ips of the wrong type"
        ips = []
        for ip in ips_raw:
            address = str(ip).split("/", 1)[0]
            try:
                ipaddress.ip_address(address)
            except ValueError:
                return f"status.devices[{i}].networkData.ips: {ip!r} is not an address in CIDR notation"
            ips.append(address)
        found.append(Attachment(name=name, interface=interface, ips=tuple(ips)))
    return tuple(found)


def claim_record(raw: Json) -> tuple[Attachment, ...] | str | None:
    """The slim record of a ResourceClaim for the claim cache: its NICs (or why malformed), None when it reports none."""
    found = claim_attachments(raw)
    return found or None


def reach(
    *,
    pod: str,
    ips: tuple[str, ...],
    network_status: str | None,
    rule: AddressRule,
    claims: tuple[tuple[str, str], ...] = (),
    claim_networks: tuple[tuple[str, tuple[Attachment, ...] | str], ...] = (),
) -> Reached | Unreached:
    """Where member ``pod`` is reached under ``rule``, or why it cannot be.

    ``ips`` are the pod's IPs, primary first (``status.podIPs``, or what its
    launcher registered); ``network_status`` its network-status annotation
    (None: absent); ``claims`` its resource claims (:func:`pod_claims`) and
    ``claim_networks`` what each claim's status reports by reference name
    (:func:`claim_attachments`; absent: the claim is not known yet). Pure;
    used for every member at every sync, so the annotation's parse is cached
    by text.
    """
    if rule.claim is not None:
        return _reach_claim(pod, rule, dict(claims), dict(claim_networks))
    if rule.network is None:
        if rule.family is None:
            return Reached(ips[0])
        ip = next((a for a in ips if family_of(a) == rule.family), None)
        if ip is None:
            return Unreached(
                "wrong_family",
                "ip_family",
                f"pod {pod} has no {rule.family} address (its IPs: {', '.join(ips)}); "
                f"the job asks for {rule.family} ({IP_FAMILY_ANNOTATION})",
            )
        return Reached(ip)
    if network_status is None:
        return Unreached(
            "no_network",
            "network_missing",
            f"pod {pod} has no annotation k8s.v1.cni.cncf.io/network-status, so no address on network "
            f"{rule.network} ({NETWORK_ANNOTATION}); is Multus attaching it (k8s.v1.cni.cncf.io/networks)?",
        )
    parsed = _parsed(network_status)
    if isinstance(parsed, str):
        return Unreached(
            "invalid_network",
            "invalid_network_status",
            f"pod {pod}: malformed k8s.v1.cni.cncf.io/network-status: {parsed}",
        )
    attachment = next((a for a in parsed if a.name == rule.network), None)
    if attachment is None:
        names = ", ".join(a.name for a in parsed) or "none"
        return Unreached(
            "no_network",
            "network_missing",
            f"pod {pod} is not attached to network {rule.network} ({NETWORK_ANNOTATION}); its networks: {names}",
        )
    candidates = [a for a in attachment.ips if rule.family is None or family_of(a) == rule.family]
    if not candidates:
        wanted = f"{rule.family} address" if rule.family else "address"
        return Unreached(
            "no_network",
            "network_missing",
            f"pod {pod} has no {wanted} on network {rule.network} "
            f"(interface {attachment.interface or '?'}, IPs: {', '.join(attachment.ips) or 'none'})",
        )
    return Reached(candidates[0], attachment.interface)


def _reach_claim(
    pod: str, rule: AddressRule, claims: dict[str, str], networks: dict[str, tuple[Attachment, ...] | str]
) -> Reached | Unreached:
    claim = str(rule.claim)
    if claim not in claims:
        return Unreached(
            "no_network",
            "network_missing",
            f"pod {pod} has no resource claim {claim!r} (spec.resourceClaims) whose NIC the job asks for "
            f"({NETWORK_CLAIM_ANNOTATION})",
        )
    found = networks.get(claim)
    if isinstance(found, str):
        return Unreached(
            "invalid_network", "invalid_network_status", f"pod {pod}: ResourceClaim {claims[claim]}: {found}"
        )
    candidates = [
        (a.interface, ip) for a in found or () for ip in a.ips if rule.family is None or family_of(ip) == rule.family
    ]
    if not candidates:
        wanted = f"{rule.family} address" if rule.family else "address"
        return Unreached(
            "no_network",
            "network_missing",
            f"pod {pod}: ResourceClaim {claims[claim]} reports no {wanted} yet "
            "(its DRA driver writes status.devices[].networkData once the NIC is set up)",
        )
    interface, ip = candidates[0]
    return Reached(ip, interface)


def host_port(spec: Json) -> bool:
    """True when a ``hostNetwork`` pod spec declares the member's port as a container port
    (one named as :data:`~model.keys.PORT_NAMES` lists): such a port is a
    ``hostPort``, bound on the node as written, so it cannot be moved."""
    if not spec.get("hostNetwork"):
        return False
    for container in spec.get("containers") or ():
        for port in (container.get("ports") or ()) if isinstance(container, dict) else ():
            if isinstance(port, dict) and port.get("name") in PORT_NAMES:
                return True
    return False


def distinct_ports(members: list[tuple[str, str, int, bool]]) -> tuple[list[int], str | None]:
    """Ports for ``members`` given as (pod, ip, port, movable) in rank order, and why they collide (None: they do not).

    The k-th member on an IP (k from 0, rank order) moves to its port plus k
    when ``movable``; the others keep theirs. A port past 65535, or two
    members left on one ``ip:port``, is a collision (the message names the pods).
    """
    seen_on_ip: dict[str, int] = {}
    ports = []
    for _, ip, port, movable in members:
        k = seen_on_ip.get(ip, 0)
        seen_on_ip[ip] = k + 1
        ports.append(port + k if movable else port)
    taken: dict[tuple[str, int], str] = {}
    for (pod, ip, port, movable), moved in zip(members, ports, strict=True):
        if moved > 65535:
            return ports, f"pod {pod}: port {port} + {moved - port} (its place among the members on {ip}) is past 65535"
        other = taken.get((ip, moved))
        if other is not None:
            fixed = "" if movable else " (a hostPort, which cannot move)"
            return ports, (
                f"pods {other} and {pod} would both listen on {_join(ip, moved)}{fixed}: "
                "give the hostNetwork pods' port by annotation or env instead of a container port, "
                "or keep them on separate nodes"
            )
        taken[(ip, moved)] = pod
    return ports, None


def _join(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
