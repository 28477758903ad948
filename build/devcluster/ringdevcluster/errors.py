"""The error every part of the dev cluster raises when the cluster cannot reach the requested state."""

from __future__ import annotations

__all__ = ["ClusterError"]


class ClusterError(RuntimeError):
    """The control plane could not be brought to the requested state.

    The message names the component and its log file.
    """
