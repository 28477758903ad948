"""The agent: per-job decisions and the ConfigMap write path.

Owns what happens once a job key leaves the queue: :mod:`agent.decide` (a pure
``decide()`` over frozen records), :mod:`agent.worker` (per-job state, the
conditional writes, Events), :mod:`agent.agent` (event routing, one worker per
job), its metrics, and :mod:`agent.api`: the API verbs it needs as a protocol
plus the one API error tree (``ApiError`` with ``Conflict``, ``NotFound``,
``Gone``) that the daemon's client raises.

It must not import :mod:`ringcontroller` (layer contract) nor any Kubernetes or
HTTP client (``kubernetes``, ``kubernetes_asyncio``, ``aiohttp``: a forbidden
contract): the daemon passes in an object with the protocol's methods, so the
agent's logic runs in unit tests on plain data.
"""
