"""Chaos runs against the local control plane (``build/chaos.sh``); see :mod:`tests.chaos.run`."""
