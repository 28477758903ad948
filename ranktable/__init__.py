"""Output formats of ring-controller and their readers; the container-side launcher in :mod:`ranktable.launch`.

The lowest layer (``ringcontroller -> agent -> model -> ranktable``): it imports
nothing from the other packages (layer contract) and nothing outside the
standard library of Python 3.9 (the ``stdlib_only`` contract), so the same
code runs in the daemon and, packed into one file (``dist/ring-launch.pyz``,
:mod:`ranktable.launch.pyzmain`), in any training image that has a python3.

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
  hostfiles) for one member, pure (:mod:`ranktable.netenv`: the network
  interface, family and port variables); :mod:`ranktable.exports` puts them
  together with the table users see; ``setup_tf_config()`` drop-in.
* :mod:`ranktable.launch`: the launcher's wing, ``ring-launch`` itself (the
  daemon never imports it: an import-linter contract). :mod:`ranktable.frozen`
  holds the frozen records the classes here are.
"""
