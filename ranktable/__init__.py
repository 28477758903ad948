"""Output formats of ring-controller and their readers, plus the container-side launcher.

The lowest layer (``ringcontroller -> agent -> model -> ranktable``): it imports
nothing from the other packages (layer contract) and nothing outside the
standard library of Python 3.9 (the ``stdlib_only`` contract), so the same
code runs in the daemon and, packed into one file (``dist/ring-launch.pyz``,
:mod:`ranktable.pyzmain`), in any training image that has a python3.

* :mod:`ranktable.clusterspec`: ``cluster.json``, the spec everything else
  derives from (data types, canonical JSON, strict parser).
* :mod:`ranktable.devices`: the Ascend device annotation, validated
  (:mod:`ranktable.levels`: its per-device network levels).
* :mod:`ranktable.hccl`: the HCCL rank table ``hccl.json`` in ascend-operator's
  tables 1.0 and 1.2 (:mod:`~ranktable.hccl_table10`) and 2.0
  (:mod:`~ranktable.hccl_table20`), and HCCL-Controller's layouts
  (:mod:`~ranktable.hccl_v2`, :mod:`~ranktable.hccl_v1`).
* :mod:`ranktable.tfconfig`, :mod:`ranktable.torchenv`, :mod:`ranktable.jaxenv`,
  :mod:`ranktable.paddleenv`, :mod:`ranktable.mindsporeenv`,
  :mod:`ranktable.hostfile`: each framework's variables (and the MPI
  hostfiles) for one member, pure; :mod:`ranktable.exports` puts them
  together with the table users see; ``setup_tf_config()`` drop-in.
* :mod:`ranktable.wait`, :mod:`ranktable.launcher`, :mod:`ranktable.apiwatch`
  (over :mod:`ranktable.kubeapi` and :mod:`ranktable.kubeconfig`: its own
  HTTP/1.1 on ``_socket`` and ``_ssl``), :mod:`ranktable.supervise`: ``ring-launch``, which waits for
  the spec (file or API) and execs the trainer, or supervises it and restarts
  it in place on a new epoch; :mod:`ranktable.exitcodes` its exit codes;
  :mod:`ranktable.records` the frozen records its classes are (``dataclasses``
  without its import cost: a launcher's CPU at start is a job's discovery
  overhead when its containers start together).
"""
