"""``python -m tests.bench.profiled OUT.prof [ring-controller flags]``: the daemon under cProfile.

The profile is taken with a CPU-time clock (``time.process_time``), not the
wall clock ``python -m cProfile`` uses: on a machine shared with the control
plane (and other work) a wall-clock profile charges a function for the time
the process waited for a CPU, which says more about the machine's load than
about the code. The profile is written when the daemon returns (SIGTERM).
"""

from __future__ import annotations

import cProfile
import sys
import time

from ringcontroller import main as entry


def main() -> int:
    """Run ``ring-controller`` with the remaining arguments; dump the profile to ``argv[1]``."""
    out, argv = sys.argv[1], sys.argv[2:]
    profile = cProfile.Profile(time.process_time)
    try:
        code: int = profile.runcall(entry.main, argv)
    finally:
        profile.dump_stats(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
