"""The model: workload kinds, slim records and the business rules on them.

Owns how each workload kind reads (one module per kind: :mod:`model.volcano`,
:mod:`~model.jobset`, :mod:`~model.trainjob`, :mod:`~model.deployment`, and
their table :mod:`~model.kinds`), which workload serves a job key and how many
members it has (a TrainJob through its JobSet and runtime), pods and ConfigMaps
reduced to frozen records (:mod:`~model.records`, :mod:`~model.pod`,
:mod:`~model.configmap`), the Ascend rules (which rank table version, rank
index, super pod: :mod:`~model.ascend`), and every label, annotation and
default (:mod:`~model.keys`).

It must not import :mod:`ringcontroller` or :mod:`agent` (layer contract) and
imports no client at all (``kubernetes``, ``kubernetes_asyncio``, ``aiohttp``:
a forbidden contract): everything here is a function of JSON already read.
"""
