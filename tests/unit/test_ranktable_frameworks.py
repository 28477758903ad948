"""Every framework's variables and the MPI hostfiles, derived from plain specs; member slots end to end."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.decide import decide
from model.keys import DEFAULT_LABEL_KEY, SLOTS_ANNOTATION, SLOTS_ENV
from model.pod import pod_record
from model.records import PodRecord
from model.template import member_slots
from model.volcano import workload_record
from ranktable import frozen
from ranktable.clusterspec import (
    STATUS_INITIALIZING,
    ClusterSpec,
    PodNotInSpec,
    SpecError,
    spec_from_json,
    spec_to_json,
)
from ranktable.exports import FRAMEWORKS, member_env
from ranktable.hostfile import hostfile_env, hostfile_text
from ranktable.jaxenv import jax_env
from ranktable.mindsporeenv import mindspore_env
from ranktable.paddleenv import paddle_env
from ranktable.torchenv import torchrun_env
from tests.support.factories import volcano_job, volcano_pod
from tests.support.specs import make_spec


def with_slots(spec: ClusterSpec, slots: dict[int, int]) -> ClusterSpec:
    """``spec`` with member ``rank`` given ``slots[rank]`` slots."""
    members = tuple(frozen.replace(m, slots=slots.get(m.rank, m.slots)) for m in spec.members)
    return frozen.replace(spec, members=members)


# torchrun ------------------------------------------------------------------------


def test_torchrun_nodes_are_pods_and_processes_are_slots() -> None:
    spec = with_slots(make_spec([("master", 1), ("worker", 2)]), {0: 4, 1: 4, 2: 2})
    assert torchrun_env(spec, pod="job-worker-1") == {
        "NNODES": "3",
        "NODE_RANK": "2",
        "PET_NNODES": "3",
        "PET_NODE_RANK": "2",
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": "127.1.0.1",
        "PET_MASTER_PORT": "2222",
    }


# JAX ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "process_id"), [("job-worker-0", "0"), ("job-worker-2", "2")], ids=["coordinator", "last"]
)
def test_jax_coordinator_is_rank_0(pod: str, process_id: str) -> None:
    assert jax_env(make_spec([("worker", 3)]), pod=pod) == {
        "JAX_COORDINATOR_ADDRESS": "127.1.0.1:2222",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": process_id,
    }


def test_jax_ipv6_coordinator_is_bracketed() -> None:
    spec = make_spec([("worker", 2)])
    spec = frozen.replace(spec, members=(frozen.replace(spec.members[0], ip="fd00::1"), spec.members[1]))
    assert jax_env(spec, pod="job-worker-1")["JAX_COORDINATOR_ADDRESS"] == "[fd00::1]:2222"


# Paddle ----------------------------------------------------------------------------


def test_paddle_collective_endpoints_in_rank_order() -> None:
    assert paddle_env(make_spec([("trainer", 3)]), pod="job-trainer-1") == {
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_TRAINERS_NUM": "3",
        "PADDLE_CURRENT_ENDPOINT": "127.1.0.2:2223",
        "PADDLE_TRAINER_ENDPOINTS": "127.1.0.1:2222,127.1.0.2:2223,127.1.0.3:2224",
    }


# MindSpore ----------------------------------------------------------------------------

MS_CASES: list[Any] = [
    pytest.param(
        [("worker", 2)],
        "job-worker-1",
        {
            "MS_ROLE": "MS_WORKER",
            "MS_SCHED_HOST": "127.1.0.1",
            "MS_SCHED_PORT": "2222",
            "MS_WORKER_NUM": "2",
            "MS_NODE_ID": "1",
        },
        id="no-scheduler-task:rank-0-hosts-it",
    ),
    pytest.param(
        [("scheduler", 1), ("worker", 2)],
        "job-scheduler-0",
        {"MS_ROLE": "MS_SCHED", "MS_SCHED_HOST": "127.1.0.1", "MS_SCHED_PORT": "2222", "MS_WORKER_NUM": "2"},
        id="scheduler-task:scheduler",
    ),
    pytest.param(
        [("scheduler", 1), ("worker", 2)],
        "job-worker-0",
        {
            "MS_ROLE": "MS_WORKER",
            "MS_SCHED_HOST": "127.1.0.1",
            "MS_SCHED_PORT": "2222",
            "MS_WORKER_NUM": "2",
            "MS_NODE_ID": "0",
        },
        id="scheduler-task:worker-ids-skip-it",
    ),
]


@pytest.mark.parametrize(("tasks", "pod", "expected"), MS_CASES)
def test_mindspore_dynamic_cluster(tasks: list[tuple[str, int]], pod: str, expected: dict[str, str]) -> None:
    assert mindspore_env(make_spec(tasks), pod=pod) == expected


def test_mindspore_rank_table_mode_counts_devices() -> None:
    env = mindspore_env(make_spec([("worker", 3)], devices=8), pod="job-worker-2")
    assert (env["RANK_ID"], env["RANK_SIZE"]) == ("16", "24")


def test_mindspore_two_schedulers_are_rejected() -> None:
    with pytest.raises(SpecError, match="one scheduler, the spec has 2"):
        mindspore_env(make_spec([("scheduler", 2), ("worker", 1)]), pod="job-worker-0")


# Hostfiles ---------------------------------------------------------------------------


def test_hostfiles_in_both_layouts_with_slots() -> None:
    spec = with_slots(make_spec([("launcher", 1), ("worker", 2)]), {1: 8, 2: 8})
    assert hostfile_text(spec) == "127.1.0.1 slots=1\n127.1.0.2 slots=8\n127.1.0.3 slots=8\n"
    assert hostfile_text(spec, flavor="mpich") == "127.1.0.1:1\n127.1.0.2:8\n127.1.0.3:8\n"


def test_members_sharing_an_ip_are_one_host() -> None:
    spec = make_spec([("worker", 3)])
    members = tuple(frozen.replace(m, ip="10.0.0.5") if m.rank < 2 else m for m in spec.members)
    assert hostfile_text(frozen.replace(spec, members=members)) == "10.0.0.5 slots=2\n127.1.0.3 slots=1\n"


def test_hostfile_variables_name_the_files() -> None:
    assert hostfile_env("/run/ring") == {
        "RING_HOSTFILE": "/run/ring/hostfile",
        "OMPI_MCA_orte_default_hostfile": "/run/ring/hostfile",
        "HYDRA_HOST_FILE": "/run/ring/hostfile.mpich",
    }


# Every derivation refuses partial specs and foreign pods --------------------------------

DERIVATIONS = [torchrun_env, jax_env, paddle_env, mindspore_env]


@pytest.mark.parametrize("derive", DERIVATIONS, ids=lambda f: f.__name__)
def test_partial_spec_and_foreign_pod_are_refused(derive: Any) -> None:
    partial = make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={0})
    with pytest.raises(SpecError, match="not completed"):
        derive(partial, pod="job-worker-0")
    with pytest.raises(PodNotInSpec, match="^pod 'job-worker-9' is not in the cluster spec"):
        derive(make_spec([("worker", 2)]), pod="job-worker-9")
    with pytest.raises(SpecError, match="not completed"):
        hostfile_text(partial)


# The combined export and its table -----------------------------------------------------


def test_every_variable_of_the_table_is_exported_and_nothing_else() -> None:
    # Every condition of the table holds: devices, a secondary network's interface, an IPv6 address
    # shared by both members (the second one gets HCCL_IF_BASE_PORT).
    spec = make_spec([("worker", 2)], devices=1)
    members = tuple(frozen.replace(m, ip="fd00::1", interface="net1") for m in spec.members)
    env = member_env(
        frozen.replace(spec, members=members), pod="job-worker-1", rank_table_file="/x/hccl.json", hostfile_dir="/h"
    )
    listed = {word.strip(";") for f in FRAMEWORKS for word in f.exports.split() if word.isupper() or "_" in word}
    listed.discard("RING_RESTART_COUNT")  # set by the supervisor, per start
    assert set(env) == {w for w in listed if not w.startswith("(")}
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_optional_exports_are_left_out() -> None:
    env = member_env(make_spec([("worker", 2)]), pod="job-worker-0")
    assert not {"RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE", "RING_HOSTFILE", "HYDRA_HOST_FILE"} & set(env)


# Slots in cluster.json and from the pod ------------------------------------------------


def test_slots_round_trip_and_default_keeps_old_text() -> None:
    plain = make_spec([("worker", 2)])
    text = spec_to_json(plain)
    assert '"slots"' not in text  # specs without slots keep their exact text
    assert spec_from_json(text) == plain
    multi = with_slots(plain, {1: 8})
    assert spec_from_json(spec_to_json(multi)).members[1].slots == 8
    assert json.loads(spec_to_json(multi))["members"][1]["slots"] == 8


@pytest.mark.parametrize("bad", [0, -1, "8", True, 1.5], ids=["zero", "negative", "string", "bool", "float"])
def test_bad_slots_in_cluster_json_are_refused(bad: object) -> None:
    obj = json.loads(spec_to_json(make_spec([("worker", 1)])))
    obj["members"][0]["slots"] = bad
    with pytest.raises(SpecError, match=r"members\[0\]\.slots"):
        spec_from_json(json.dumps(obj))


SLOT_RULES: list[Any] = [
    pytest.param({}, {}, (1, None), id="default"),
    pytest.param({SLOTS_ANNOTATION: "8"}, {}, (8, None), id="annotation"),
    pytest.param({}, {SLOTS_ENV: "4"}, (4, None), id="env"),
    pytest.param({SLOTS_ANNOTATION: "2"}, {SLOTS_ENV: "4"}, (2, None), id="annotation-wins"),
    pytest.param(
        {SLOTS_ANNOTATION: "x"}, {}, (1, f"annotation {SLOTS_ANNOTATION}: slots 'x' is not an integer"), id="bad"
    ),
    pytest.param({}, {SLOTS_ENV: "0"}, (1, f"env {SLOTS_ENV}: slots 0 is outside 1-65535"), id="zero"),
]


@pytest.mark.parametrize(("annotations", "env", "expected"), SLOT_RULES)
def test_member_slots_rule(annotations: dict[str, str], env: dict[str, str], expected: tuple[int, str | None]) -> None:
    spec = {"containers": [{"name": "c", "env": [{"name": k, "value": v} for k, v in env.items()]}]}
    assert member_slots(spec, annotations) == expected


def test_slots_reach_the_spec_and_bad_slots_keep_the_member_out() -> None:
    raw = volcano_job("j", tasks=[("worker", 2)], uid="job-uid")
    wl = workload_record(raw, label_key=DEFAULT_LABEL_KEY)

    def running(index: int, annotations: dict[str, str]) -> PodRecord:
        pod = volcano_pod(raw, task="worker", index=index, uid=f"u{index}", ip=f"127.1.0.{index + 1}", phase="Running")
        pod["metadata"].setdefault("annotations", {}).update(annotations)
        return pod_record(pod)

    good = decide(wl, [running(0, {SLOTS_ANNOTATION: "4"}), running(1, {})], previous=None)
    assert good.spec.completed
    assert [m.slots for m in good.spec.members] == [4, 1]
    bad = decide(wl, [running(0, {SLOTS_ANNOTATION: "x"}), running(1, {})], previous=None)
    assert not bad.spec.completed
    assert [p.reason for p in bad.problems] == ["invalid_slots"]
