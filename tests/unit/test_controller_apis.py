"""What the controller turns off when discovery finds an optional API missing (ringcontroller.serverinfo).

Offline: the controller is built without a server and its discovery result
is set as :meth:`Controller.discover` sets it, so what is checked is the rule
that follows: without ValidatingAdmissionPolicies no job counts
self-registrations, whatever its annotation or the flag says.
"""

from __future__ import annotations

from typing import cast

from kubernetes_asyncio.client import ApiClient

from model.keys import SELF_REGISTER_ANNOTATION
from model.kinds import KINDS
from model.records import JobKey
from model.volcano import workload_record
from ringcontroller.controller import Controller
from ringcontroller.options import parse
from tests.support.factories import volcano_job

VOLCANO = next(k for k in KINDS if k.kind == "Job" and k.group == "batch.volcano.sh")


def controller_with(job: dict[str, object], *, flags: list[str]) -> Controller:
    controller = Controller(api=cast(ApiClient, None), options=parse(flags))
    options = controller.options
    record = workload_record(job, label_key=options.label_key)
    controller._cached_workload = lambda kind, key: record if kind == VOLCANO else None  # type: ignore[method-assign]
    return controller


def key_of(job: dict[str, object]) -> JobKey:
    meta = job["metadata"]
    assert isinstance(meta, dict)
    return JobKey(f"{VOLCANO.prefix}/{meta['namespace']}/{meta['name']}")


def test_without_admission_policies_a_job_that_asks_for_self_registration_does_not_get_it() -> None:
    job = volcano_job("j", namespace="ns", tasks=[("worker", 2)])
    job["metadata"].setdefault("annotations", {})[SELF_REGISTER_ANNOTATION] = "true"  # type: ignore[index, union-attr]
    controller = controller_with(job, flags=["--self-registration"])
    controller.api_available["validatingadmissionpolicies"] = True
    served = controller._workload(key_of(job))
    assert served is not None and served.self_register is True
    controller.api_available["validatingadmissionpolicies"] = False
    served = controller._workload(key_of(job))
    assert served is not None and served.self_register is False


def test_without_admission_policies_the_flag_does_not_turn_it_on_either() -> None:
    job = volcano_job("j", namespace="ns", tasks=[("worker", 2)])
    controller = controller_with(job, flags=["--self-registration"])
    controller.api_available["validatingadmissionpolicies"] = True
    served = controller._workload(key_of(job))
    assert served is not None and served.self_register is None  # the flag decides
    controller.api_available["validatingadmissionpolicies"] = False
    served = controller._workload(key_of(job))
    assert served is not None and served.self_register is False  # and beats the flag
