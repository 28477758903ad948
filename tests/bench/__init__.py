"""The benchmark: latency, throughput and memory of ring-controller on the real control plane.

``build/bench.sh`` runs :mod:`tests.bench.bench`. The modules split the work
the way the measurement is made:

- :mod:`tests.bench.load` creates the Volcano Jobs and their pods as Volcano's
  job controller would, and churns pods;
- :mod:`tests.bench.observer` is the bench's own view of the cluster (pod and
  ConfigMap watches with timestamps): latencies are measured from outside
  the controller, the way a user's training pods experience them;
- :mod:`tests.bench.measure` reads the controller process (``/proc``) and its
  ``/metrics``;
- :mod:`tests.bench.report` turns the figures into the JSON interface, the
  human table, the targets and the comparison with an earlier run.
"""
