"""The daemon ``ring-controller``: wiring, the API client and operations.

The top layer (``ringcontroller -> agent -> model -> ranktable``). It owns
everything that talks to the API server or the process: the one API client
(:mod:`ringcontroller.kube`: request path, timeout table, request counter),
the informers (:mod:`~ringcontroller.reflector`), the work queue
(:mod:`~ringcontroller.workqueue`), the wiring of informers, queue and workers
(:mod:`~ringcontroller.controller`), leader election, flags, logs, metrics,
probes and the entry point (:mod:`~ringcontroller.main`). Beside the daemon,
:mod:`ringcontroller.kubectl_ring` is the read-only ``kubectl ring`` plugin:
it runs :mod:`agent.decide` and the launcher's code on objects it reads with
the sync client, and reaches none of the daemon's write path (a forbidden
contract).

It makes no business decision: which workload serves a job and how many
members it has are :mod:`model`'s rules, what to write is :mod:`agent`'s.
Nothing imports it (import-linter's layer contract); inside it, only
:mod:`ringcontroller.kube` (client) and :mod:`ringcontroller.probes` (HTTP
server) import ``aiohttp``.
"""
