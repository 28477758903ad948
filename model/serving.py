"""Which workload serves a job key, and how many members it has.

A job key (``jobset/ns/name``) may be claimed by more than one kind: a
TrainJob and the JobSet it owns share it, so that the JobSet's pods reach the
TrainJob's worker. The rules, in one place:

- Kinds are tried in :data:`model.kinds.KINDS` order; the first record that is
  ``served`` serves the key (a JobSet owned by a TrainJob is not).
- A workload that runs several jobs (a LeaderWorkerSet's groups) serves
  each under ``<its key>-<group>`` (:meth:`~model.records.WorkloadRecord.for_group`),
  for the groups it has now; its own key serves nothing.
- A workload whose pod template names a PodGroup (``spec.schedulingGroup``)
  serves nothing while that PodGroup is a job (labelled): its pods are
  served through the group (:mod:`model.podgroup`); with the group absent
  or unlabelled it serves its key as usual.
- A TrainJob takes its JobSet's restart count as its version (the JobSet
  "lends" it), so pods of older attempts never count.
- A TrainJob without ``spec.trainer.numNodes`` takes its
  ClusterTrainingRuntime's ``spec.mlPolicy.numNodes`` as every task's replica
  count; without a usable runtime the record carries an ``error``.

Pure functions over the informers' records: the daemon passes lookups into
its caches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from model import trainjob
from model.kinds import KINDS, POD_GROUP, WorkloadKind
from model.records import JobKey, WorkloadRecord, split_group

#: ``lookup(kind, "<namespace>/<name>")``: the cached record of that kind, None
#: if absent or the kind is not watched.
Lookup = Callable[[WorkloadKind, str], WorkloadRecord | None]
#: ``runtime_nodes(name)``: the cached ``numNodes`` of ClusterTrainingRuntime
#: ``name``, None if absent, invalid or runtimes are not watched.
RuntimeNodes = Callable[[str], int | None]


def serving_workload(key: JobKey, *, lookup: Lookup, runtime_nodes: RuntimeNodes) -> WorkloadRecord | None:
    """The workload serving job ``key`` as the agent must see it, None if none does."""
    prefix, _, rest = key.partition("/")
    found = [record for kind in KINDS if kind.prefix == prefix for record in [lookup(kind, rest)] if record is not None]
    if not found:
        return _group(key, lookup=lookup)
    served = next((r for r in found if r.served and not r.groups), None)
    if served is not None and served.in_group is not None:
        namespace, _, name = served.in_group.partition("/")[2].partition("/")
        if lookup(POD_GROUP, f"{namespace}/{name}") is not None:
            return None  # its pods are served through the labelled PodGroup they name
    if served is None or served.kind != trainjob.KIND:
        return served
    lender = next((r for r in found if not r.served), None)
    return trainjob_as_served(served, jobset=lender, runtime_nodes=runtime_nodes)


def trainjob_as_served(
    record: WorkloadRecord, *, jobset: WorkloadRecord | None, runtime_nodes: RuntimeNodes
) -> WorkloadRecord:
    """TrainJob ``record`` completed from what it defers to (the rules above).

    ``jobset`` (the JobSet it owns, if cached) gives the version: its restart
    count. When ``record.runtime_ref`` is set (no ``numNodes`` of its own),
    ``runtime_nodes(ref)`` gives every task's replica count; None (runtime
    absent, invalid, or not watched) makes the record invalid.
    """
    if jobset is not None:
        record = replace(record, version=jobset.version)
    if record.runtime_ref is None:
        return record
    nodes = runtime_nodes(record.runtime_ref)
    if nodes is None:
        return replace(
            record, error=f"ClusterTrainingRuntime {record.runtime_ref} not found or without spec.mlPolicy.numNodes"
        )
    return replace(record, tasks=tuple(replace(t, replicas=nodes) for t in record.tasks))


def _group(key: JobKey, *, lookup: Lookup) -> WorkloadRecord | None:
    """The group record ``key`` names (``<kind>/<namespace>/<name>-<group>``), None if no workload has that group."""
    prefix, _, rest = key.partition("/")
    split = split_group(rest)
    if split is None:
        return None
    name, group = split
    for kind in KINDS:
        if kind.prefix == prefix:
            record = lookup(kind, name)
            if record is not None and record.served and group < record.groups:
                return record.for_group(group)
    return None
