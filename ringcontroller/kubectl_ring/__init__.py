"""``kubectl ring``: the controller's view of a job, for people, read-only.

A kubectl plugin (an executable ``kubectl-ring`` on the PATH). It reads the
same objects the daemon watches (labelled workloads, their pods, the spec
ConfigMaps, the jobs' Events) once, through the user's kubeconfig, with
``get`` and ``list`` only, and runs the daemon's and the launcher's own code
on them:

- which workload serves a job and how many members it has:
  :func:`model.serving.serving_workload`, the kinds' records;
- which slots count and why the others do not: :func:`agent.decide.explain`
  (the decision is :func:`agent.decide.decide`'s);
- what ``ring-launch`` exports in a pod: :class:`ranktable.launch.wait.Judge` and
  :func:`ranktable.launch.launcher.launch_env` on the ConfigMap's files, with the
  options parsed from the pod's command by the launcher's own parser.

Modules: :mod:`~ringcontroller.kubectl_ring.api` (the only one that talks
to the API server: the sync ``kubernetes`` client, GET requests only),
:mod:`~ringcontroller.kubectl_ring.jobs` (pure: raw objects to job views),
:mod:`~ringcontroller.kubectl_ring.render` (pure: tables, describe text,
JSON/YAML), :mod:`~ringcontroller.kubectl_ring.cli` (flags, exit codes).
It imports nothing of the daemon's asynchronous machinery.
"""
