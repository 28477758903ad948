"""The fleet-scale blocks of docs/performance.md, rendered from ``tests/bench/figures/scale/*.json``.

Registered in :data:`tests.support.docblocks.BLOCKS` (the generated-block
protocol is described there):

- ``scale-touch``: the touch at scale, one row per ``build/bench.sh --jobs 1
  --pods N`` run (``touch-*.json`` and ``one-*.json``), in the order run;
- ``scale-offload``: one big job's syncs with the decision on the event loop
  and on the thread, on plain data (``offload-20000.json``);
- ``scale-observers``: the observers apart from the load (``observers-50x8.json``);
- ``scale-bigspec``: one 20,000-member spec from the launcher's side (``bigspec-20000.json``);
- ``scale-fleet`` and ``scale-fleet-failover``: 1,000 jobs of 8 pods and the
  leader killed beside them (``jobs-1000x8-failover.json``);
- ``scale-fleet-mixed``: 1,000 jobs of 8 pods, Volcano Jobs and JobSets
  mixed (``build/bench.sh --jobsets N``, ``jobs-1000x8-mixed.json``), the
  figures of the whole load and the ones that differ by kind, side by side
  with the same load of Volcano Jobs only run next on the same cluster
  (``jobs-1000x8-volcano.json``);
- ``scale-lease``: the leader's Lease writes in the 20,000-member runs, from
  the API server's audit log (``lease-audit-*.json``, :mod:`tests.bench.leaseaudit`);
- ``scale-one-job`` and ``scale-one-job-failover``: one 20,000-member job on
  kwok (``one-*.json``), with the leader's Lease renewals where it ran under
  leader election.

Every block names the command, the date and the machine's load average
(start and end of the run) beside its figures: they come from a 2-core
machine shared with other work.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from model import jobset, volcano

__all__ = ["BLOCKS", "SCALE"]

SCALE = Path(__file__).resolve().parents[2] / "tests" / "bench" / "figures" / "scale"

Json = Any

#: bench.sh flags that change no figure (where the cluster and the output live).
_LOCAL_FLAGS = ("--json", "--state-dir")


def _doc(name: str) -> Json:
    return json.loads((SCALE / name).read_text(encoding="utf-8"))


def _command(command: str) -> str:
    """The recorded command without the flags that only say where files go."""
    words = shlex.split(command)
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in _LOCAL_FLAGS:
            skip = True
            continue
        if word.startswith(tuple(f + "=" for f in _LOCAL_FLAGS)):
            continue
        out.append(word)
    return " ".join(out)


def _load_avg(doc: Json) -> str:
    machine = doc.get("machine") or {}
    start, end = machine.get("load_avg_start"), machine.get("load_avg_end")
    if start and end:
        return f"{start[0]:.1f} at start, {end[0]:.1f} at end"
    if doc.get("load_avg"):
        return f"{doc['load_avg'][0]:.1f}"
    return "not recorded"


def _source(doc: Json, name: str) -> str:
    command = doc.get("command") or (doc.get("scenario") or {}).get("command", "")
    return f"`{_command(command)}` (`{name}`, {doc.get('date', 'date not recorded')}, load average {_load_avg(doc)})"


def _ms(q: Json, keys: tuple[str, ...] = ("p50", "p90", "p99", "max")) -> str:
    return " / ".join(f"{q[k]:,.1f}" for k in keys)


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


# --- the touch at scale --------------------------------------------------------


def _touch_files() -> list[tuple[str, Json]]:
    found = [(p.name, _doc(p.name)) for p in sorted(SCALE.glob("touch-*.json"))]
    # A one-job run counts where its spec completed (a refused spec has no touch to time).
    found += [(p.name, _doc(p.name)) for p in _one_job_files() if _doc(p.name)["spec"].get("completed_jobs")]
    return sorted(found, key=lambda nd: (nd[1].get("date", ""), nd[1]["scenario"]["pods"]))


def _one_job_files() -> list[Path]:
    return sorted(SCALE.glob("one-*.json"))


def scale_touch() -> str:
    """One row per single-job run: members, the ceiling, pod writes per epoch, touch times, API server CPU."""
    lines = [
        "| members | `--touch-max-members` | touched | pod writes per epoch (controller / API server `PATCH pods`) "
        "| first / p50 / last touch seen after the spec completed (s) | touches/s | API server CPU in the run (s) "
        "| load avg (start, end) | date | JSON |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, doc in _touch_files():
        touch = doc.get("touch") or {}
        members = doc["scenario"]["pods"]
        ceiling = doc["scenario"].get("touch_max_members")
        touched = touch.get("touched", 0)
        skipped = touch.get("controller_touches_skipped", 0)
        if touched:
            times = " / ".join(f"{touch[k] / 1000:,.1f}" for k in ("first_ms",)) + " / "
            times += f"{touch['delay_ms']['p50'] / 1000:,.1f} / {touch['last_ms'] / 1000:,.1f}"
            rate = f"{touch['pods_per_s']:,.0f}"
        else:
            times, rate = "–", "–"
        what = f"all {touched:,}" if touched == members else f"none ({skipped:,} skipped)" if not touched else touched
        machine = doc["machine"]
        lines.append(
            f"| {members:,} | {ceiling:,} | {what} | {touch.get('controller_patches', 0):,} / "
            f"{touch.get('apiserver_pod_patches', 0):,} | {times} | {rate} | {doc['cpu_s']['kube-apiserver']:,.1f} "
            f"| {machine['load_avg_start'][0]:.1f}, {machine['load_avg_end'][0]:.1f} | {doc.get('date', '–')} "
            f"| `{name}` |"
        )
    commands = sorted({_command(d["scenario"]["command"]) for _, d in _touch_files()})
    lines += ["", "Commands: " + ", ".join(f"`{c}`" for c in commands) + "."]
    return "\n".join(lines)


# --- the observers apart ---------------------------------------------------------


def scale_observers() -> str:
    """The three observers of one run: p50/p90/p99/max, and how far the two apart agree."""
    name = "observers-50x8.json"
    doc = _doc(name)
    agreement = doc["latency_agreement"]
    lines = [
        f"{_source(doc, name)}:",
        "",
        "| observer | p50 / p90 / p99 / max (ms) |",
        "|---|---|",
        f"| first process apart (the figures of record, `latency_ms`) | {_ms(doc['latency_ms'])} |",
        f"| second process apart (`latency_check_ms`) | {_ms(doc['latency_check_ms'])} |",
        f"| on the load's loop (`latency_in_loop_ms`) | {_ms(doc['latency_in_loop_ms'])} |",
        "",
        f"The two processes apart differ by {agreement['p50']:.1%} at p50 and {agreement['p99']:.1%} at p99 "
        f"(within {agreement['within']:.0%}: {'yes' if agreement['agree'] else 'no'}).",
    ]
    return "\n".join(lines)


# --- one 20,000-member spec from the launcher's side ------------------------------


def scale_bigspec() -> str:
    """Stored size, decode CPU and the launcher's cost, per shape of the 20,000-member spec."""
    name = "bigspec-20000.json"
    doc = _doc(name)
    lines = [
        f"{_source(doc, name)}:",
        "",
        "| members | plain bytes | stored (gzip) of the limit | decode CPU median / max (s) "
        "| launcher CPU median (s) | launcher peak RSS (MiB) | launcher wall median (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        shape = "plain" if not row["devices_per_member"] else f"{row['devices_per_member']} device each (rank table)"
        plain = " + ".join(f"{v:,}" for v in row["plain_bytes"].values())
        stored = row["stored"]
        launcher = row["launcher"]
        lines.append(
            f"| {row['members']:,}, {shape} | {plain} | {stored['bytes']:,} of {stored['limit']:,} "
            f"| {row['decode_cpu_s']['median']:.3f} / {row['decode_cpu_s']['max']:.3f} | {launcher['cpu_s_median']:.3f} "
            f"| {launcher['rss_mb_max']:.1f} | {launcher['wall_s_median']:.1f} |"
        )
    return "\n".join(lines)


# --- a run of record: the load, then fail-over --------------------------------------


def _run_rows(doc: Json) -> list[str]:
    latency, check, loop = doc["latency_ms"], doc["latency_check_ms"], doc["latency_in_loop_ms"]
    agreement = doc["latency_agreement"]
    samples = ", ".join(f"{s['rss_mb']:.1f} at {s['pods']:,} pods" for s in doc["rss_samples"])
    cpu = doc["cpu_s"]
    queue = doc["controller_queue"]
    jobs = doc["scenario"]["jobs"]
    touch = doc.get("touch") or {}
    requests = ", ".join(f"{verb} {n:,}" for verb, n in doc["api_requests"].items())
    spec = doc.get("spec") or {}
    rows = ["| figure | value | target (issue 36) |", "|---|---|---|"]
    if latency.get("count"):
        target = "≤ 2,000 ms" if jobs == 1 else "p99 ≤ 150"
        met = latency["max"] <= 2000 if jobs == 1 else latency["p99"] <= 150
        rows += [
            f"| latency, last member Running → spec completed, p50 / p90 / p99 / max (ms), first observer apart "
            f"| {_ms(latency)} | {target}: {_verdict(met)} |",
            f"| the same, second observer apart (differs by {agreement['p50']:.1%} / {agreement['p99']:.1%} "
            f"at p50 / p99) | {_ms(check)} | agree within {agreement['within']:.0%}: {_verdict(agreement['agree'])} |",
            f"| the same, observer on the load's loop | {_ms(loop)} | – |",
        ]
    else:
        rows.append(
            f"| latency, last member Running → spec completed | – (no spec completed: "
            f"{spec.get('too_large_events', 0)} `SpecTooLarge`) | – |"
        )
    rows += [
        f"| ConfigMap writes per job | {doc['configmap_writes_per_job']:g} | ≤ 2: "
        f"{_verdict(doc['configmap_writes_per_job'] <= 2)} |",
        f"| controller peak RSS (MB) | {doc['controller_rss_mb']:.1f} (RSS {samples}) | ≤ 150: "
        f"{_verdict(doc['controller_rss_mb'] <= 150)} |",
        f"| CPU during the load (s) | controller {doc['controller_cpu_s']:,.1f}, API server "
        f"{cpu.get('kube-apiserver', 0):,.1f}, kwok {cpu.get('kwok', 0):,.1f}, etcd {cpu.get('etcd', 0):,.1f} | – |",
        f"| syncs | {queue['syncs']:,} ({queue['syncs'] / jobs:,.1f} per job; queue wait {queue['wait_mean_ms']:.1f} ms, "
        f"sync {queue['sync_mean_ms']:.1f} ms mean) | – |",
    ]
    lag = doc.get("loop_lag") or {}
    if lag.get("samples"):
        rows.append(
            f"| event loop held, longest (s; `ringcontroller_event_loop_lag_max_seconds`) | {lag['max_s']:.2f} "
            f"({lag['over_1_s']:,} of {lag['samples']:,} samples over 1 s, {lag['over_0_5_s']:,} over 0.5 s) | – |"
        )
    if touch and spec.get("completed_jobs"):
        rows.append(
            f"| pod touches | {touch.get('touched', 0):,} of {touch.get('members', 0):,} members"
            + (
                f", last seen {touch['last_ms'] / 1000:,.1f} s after its spec completed "
                f"(p50 {touch['delay_ms']['p50'] / 1000:,.2f} s)"
                if touch.get("touched")
                else f" ({touch.get('controller_touches_skipped', 0):,} skipped: over `--touch-max-members`)"
            )
            + " | – |"
        )
    rows.append(f"| controller API requests | {requests} | – |")
    if spec.get("too_large_events"):
        rows.append(
            f"| spec (bytes) | {spec['too_large_bytes']:,} plain; compressed over the limit of "
            f"{spec['limit_bytes']:,}: `SpecTooLarge` | within the limit: missed |"
        )
    elif spec.get("max_bytes"):
        rows.append(
            f"| stored spec (bytes) | {spec['max_bytes']:,} of {spec['limit_bytes']:,} | within the limit: met |"
        )
    return rows


def _lease_rows(doc: Json) -> list[str]:
    lease = doc.get("lease")
    if not lease:
        return []
    lost = ", ".join(lease["lost"]) or "never"
    return [
        "",
        "The leader's Lease renewals through the load (the controller under `--leader-elect`, lease 15 s, "
        "renew deadline 10 s, retry 2 s):",
        "",
        "| renewals | mean (s) | slower than the retry period | slowest (s) | least time left to the deadline (s) "
        "| renewal loop woke late, at most (s) | failed attempts | lease lost |",
        "|---|---|---|---|---|---|---|---|",
        f"| {lease['renewals']:,} | {lease['mean_s']} | {lease['slow']:,} | {lease['slowest_s'] or '–'} "
        f"| {lease['least_left_s'] or '–'} | {lease['woke_late_max_s'] or '–'} | {lease['failed_attempts']:,} | {lost} |",
    ]


def _failover_rows(doc: Json) -> list[str]:
    failover = doc["failover"]
    lagged = all(r.get("new_leader_loop_lag") for r in failover["rounds"])
    lines = (
        [
            "| round | lease taken (s) | probe spec completed (s) | new leader's event loop held, longest (s) |",
            "|---|---|---|---|",
        ]
        if lagged
        else ["| round | lease taken (s) | probe spec completed (s) |", "|---|---|---|"]
    )
    for n, r in enumerate(failover["rounds"], start=1):
        lag = f" {r['new_leader_loop_lag']['max_s']:.2f} |" if lagged else ""
        lines.append(f"| {n} | {r['lease_s']:.1f} | {r['first_spec_s']:.1f} |{lag}")
    first = failover["first_spec_s"]
    target = failover["lease_duration_s"] + 10
    listed, rss = failover["standby_list_s"], failover["standby_rss_mb"]
    lines += [
        "",
        f"Probe spec completed p50 {first['p50']:.1f} s, max {first['max']:.1f} s after the kill (target: lease + 10 s "
        f"= {target:g} s: p50 {_verdict(first['p50'] <= target)}, max {_verdict(first['max'] <= target)}); "
        f"{failover['epoch_changes']} other job(s) changed epoch. A restarted controller listed the namespace and was "
        f"ready in {min(listed):.1f}–{max(listed):.1f} s, at {min(rss):.1f}–{max(rss):.1f} MB RSS.",
    ]
    return lines


def _fleet_files() -> list[str]:
    """The 1,000-job runs with fail-overs (``jobs-1000x8-failover*.json``), the newest first."""
    names = [p.name for p in SCALE.glob("jobs-1000x8-failover*.json")]
    return sorted(names, key=lambda n: str(_doc(n).get("date", "")), reverse=True)


def scale_fleet() -> str:
    """1,000 jobs of 8 pods: the figures of the load against issue 36's targets, run by run."""
    lines: list[str] = []
    for name in _fleet_files():
        doc = _doc(name)
        lines += ["", f"{_source(doc, name)}:", "", *_run_rows(doc)]
    return "\n".join(lines[1:])


#: The mixed 1,000-job run of record, and the Volcano-only run beside it (same cluster, one after the other).
MIXED = "jobs-1000x8-mixed.json"
PAIRED = "jobs-1000x8-volcano.json"
#: How the blocks name the bench's workload kinds (the controller's ``kind`` metric label).
_KIND_NAMES = {volcano.SHORT: "Volcano Job", jobset.SHORT: "JobSet"}


def _in_kind_order(by_kind: dict[str, Json]) -> list[tuple[str, Json]]:
    """``by_kind``'s items, the kinds in :data:`_KIND_NAMES` order (the JSON's keys are sorted by name)."""
    order = list(_KIND_NAMES)
    return sorted(by_kind.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))


def _kind_rows(doc: Json) -> list[str]:
    """The figures of each kind of a mixed run (``by_kind``): latency by both observers apart, writes, touches."""
    lines = [
        "| kind | jobs | latency p50 / p90 / p99 / max (ms), first observer apart | the same, second observer apart "
        "| ConfigMap writes per job | controller's own latency, mean (ms) | pods touched |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, figures in _in_kind_order(doc["by_kind"]):
        latency, check = figures["latency_ms"], figures["latency_check_ms"]
        lines.append(
            f"| {_KIND_NAMES.get(kind, kind)} | {figures['jobs']:,} | {_ms(latency)} ({latency['count']:,} measured) "
            f"| {_ms(check)} | {figures['configmap_writes_per_job']:g} | {figures['controller_latency_mean_ms']:,.1f} "
            f"| {figures['pod_touches_ok']:,} |"
        )
    return lines


def _side_by_side(mixed: Json, alone: Json) -> list[str]:
    """The figures of the mixed run and of the Volcano-only one, row by row."""

    def rss(doc: Json) -> str:
        samples = " / ".join(f"{sample['rss_mb']:.1f}" for sample in doc["rss_samples"])
        return f"{doc['controller_rss_mb']:.1f} ({samples})"

    def cpu(doc: Json) -> str:
        c = doc["cpu_s"]
        return (
            f"{c.get('kube-apiserver', 0):,.1f} / {c.get('kube-controller-manager', 0):,.1f} / "
            f"{c.get('kube-scheduler', 0):,.1f} / {c.get('kwok', 0):,.1f} / {c.get('etcd', 0):,.1f}"
        )

    def requests(doc: Json) -> str:
        return ", ".join(f"{verb} {n:,}" for verb, n in doc["api_requests"].items())

    def writes(doc: Json, what: str) -> str:  # only the Job controller writes ``jobs/status`` here
        return f"{doc['apiserver_writes'].get(what, 0):,}"

    rows = [
        ("latency p50 / p90 / p99 / max (ms), first observer apart", lambda d: _ms(d["latency_ms"])),
        ("the same, second observer apart", lambda d: _ms(d["latency_check_ms"])),
        ("ConfigMap writes per job", lambda d: f"{d['configmap_writes_per_job']:g}"),
        ("controller CPU during the load (s)", lambda d: f"{d['controller_cpu_s']:,.1f}"),
        ("controller peak RSS (MB; at 0 / 4,000 / 8,000 pods)", rss),
        ("controller syncs per job", lambda d: f"{d['controller_queue']['syncs'] / d['scenario']['jobs']:,.1f}"),
        ("controller API requests", requests),
        ("CPU (s): API server / controller-manager / scheduler / kwok / etcd", cpu),
        ("API server writes: `POST events` / `PUT jobs/status`", lambda d: f"{writes(d, 'POST events')} / "
         f"{writes(d, 'PUT jobs/status')}"),
        ("all specs completed after (s)", lambda d: f"{d['timings_s']['all_settled']:,.1f}"),
    ]  # fmt: skip
    lines = ["| figure | half JobSets | Volcano Jobs only |", "|---|---|---|"]
    lines += [f"| {name} | {value(mixed)} | {value(alone)} |" for name, value in rows]
    return lines


def scale_fleet_mixed() -> str:
    """1,000 jobs of 8 pods, Volcano Jobs and JobSets mixed: the whole load, then by kind."""
    doc, alone = _doc(MIXED), _doc(PAIRED)
    mix = " and ".join(
        f"{n:,} {_KIND_NAMES.get(kind, kind)}s" for kind, n in _in_kind_order(doc["scenario"]["mix"]) if n
    )
    return "\n".join(
        [
            f"{_source(doc, MIXED)}, {mix}:",
            "",
            *_run_rows(doc),
            "",
            "By kind, the same run:",
            "",
            *_kind_rows(doc),
            "",
            f"Beside it, the same load of Volcano Jobs only, next on the same cluster: {_source(alone, PAIRED)}:",
            "",
            *_side_by_side(doc, alone),
        ]
    )


def scale_fleet_failover() -> str:
    """The leader killed beside the 1,000 jobs, round by round (each run named when there are several)."""
    names = _fleet_files()
    if len(names) == 1:
        return "\n".join(_failover_rows(_doc(names[0])))
    lines: list[str] = []
    for name in names:
        doc = _doc(name)
        lines += ["", f"{_source(doc, name)}:", "", *_failover_rows(doc)]
    return "\n".join(lines[1:])


def scale_one_job() -> str:
    """One 20,000-member job on kwok, run by run: the load's figures and the leader's renewals."""
    lines: list[str] = []
    for path in _one_job_files():
        doc = _doc(path.name)
        lines += ["" if lines else "", f"{_source(doc, path.name)}:", "", *_run_rows(doc), *_lease_rows(doc)]
    return "\n".join(lines[1:])


def scale_one_job_failover() -> str:
    """The leader killed beside the 20,000-member job."""
    lines: list[str] = []
    for path in [p for p in _one_job_files() if _doc(p.name).get("failover")]:
        doc = _doc(path.name)
        lines += ["", f"{_source(doc, path.name)}:", "", *_failover_rows(doc)]
    return "\n".join(lines[1:])


def scale_lease() -> str:
    """The leader's Lease writes in the 20,000-member runs, from the API server's audit log, run by run."""
    docs = sorted(((p.name, _doc(p.name)) for p in SCALE.glob("lease-audit-*.json")), key=lambda nd: nd[1]["first"])

    def cell(q: Json) -> str:
        return f"{q['min']:.2f} / {q['p50']:.2f} / {q['p90']:.2f} / {q['max']:.2f}"

    lines = [
        "| run | renewal | writes | apart (s), min / p50 / p90 / max | server time per write (s) "
        "| client's `renewTime` stamp → server received (s) | lease lost |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, doc in docs:
        lines.append(
            f"| `{doc['run']}` ({doc['first'][:16].replace('T', ' ')} UTC, `{name}`) | {doc['renewal']} "
            f"| {doc['writes']:,} | {cell(doc['apart_s'])} | {cell(doc['server_s'])} | {cell(doc['client_to_server_s'])} "
            f"| {doc.get('lease_lost_at') or 'no'} |"
        )
    commands = sorted({d["command"] for _, d in docs})
    lines += ["", "Command: " + ", ".join(f"`{c}`" for c in commands) + " (the retry period is 2 s)."]
    return "\n".join(lines)


def scale_offload() -> str:
    """One big job's syncs on plain data, the decision on the event loop and on the thread (``offload-20000.json``)."""
    name = "offload-20000.json"
    doc = _doc(name)
    lines = [
        f"{_source(doc, name)}, {doc['members']:,} members, peak RSS {doc['peak_rss_mb']:.1f} MB:",
        "",
        "| decided | first sync (s) | new leader's first sync (s) | CPU, both (s) | loop held, longest / median (s) |",
        "|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        where = "on the event loop" if r["where"] == "loop" else "on the thread"
        lines.append(
            f"| {where} | {r['first_sync_s']:.2f} | {r['new_leader_sync_s']:.2f} | {r['cpu_s']:.2f} "
            f"| {r['loop_held_max_s']:.2f} / {r['loop_held_median_s']:.3f} |"
        )
    return "\n".join(lines)


BLOCKS = {
    "scale-offload": scale_offload,
    "scale-touch": scale_touch,
    "scale-observers": scale_observers,
    "scale-bigspec": scale_bigspec,
    "scale-fleet": scale_fleet,
    "scale-fleet-failover": scale_fleet_failover,
    "scale-fleet-mixed": scale_fleet_mixed,
    "scale-lease": scale_lease,
    "scale-one-job": scale_one_job,
    "scale-one-job-failover": scale_one_job_failover,
}
"""Block name -> renderer."""
