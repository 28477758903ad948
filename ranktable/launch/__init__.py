"""The launcher's wing: ``ring-launch``, which runs in every training container.

Everything here serves the container side, never the daemon (an import-linter
contract in setup.cfg: ``ringcontroller``, ``agent`` and ``model`` import
nothing of it; ``kubectl ring`` alone reads the launcher's derivation, to show
what a pod would get):

* :mod:`~ranktable.launch.pyzmain`: the entry of ``dist/ring-launch.pyz``
  (checks the interpreter first); :mod:`~ranktable.launch.pyzfile` the file
  itself (``--install``, the damage message).
* :mod:`~ranktable.launch.launcher`: ``ring-launch``'s ``main``, its options
  (:mod:`~ranktable.launch.launchopts`) and exit codes
  (:mod:`~ranktable.launch.exitcodes`).
* :mod:`~ranktable.launch.wait`: waiting for the completed spec that holds this
  pod, from the mounted file or (:mod:`~ranktable.launch.apiwatch`) the API
  server, through :mod:`~ranktable.launch.kubeapi` and
  :mod:`~ranktable.launch.kubeconfig`; :mod:`~ranktable.launch.earlyreg` sends
  the self-registration before the rest of the launcher loads.
* :mod:`~ranktable.launch.supervise`: runs the trainer and restarts it in place
  on a new epoch.

It builds on the formats one level up (the spec, the framework variables, the
stored forms), never the other way round.
"""
