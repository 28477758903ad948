"""``ring-launch --supervise``: stay the parent, restart the trainer in place on a new epoch.

Without ``--supervise`` the launcher execs the trainer, and a membership
change (a peer pod replaced, an IP changed) reaches nobody: TensorFlow's
MultiWorkerMirroredStrategy cannot lose a peer, so the survivors hang or fail
and the whole job is torn down and recreated. With it, ``ring-launch`` stays
the parent process (PID 1 of the container) and:

1. starts CMD in its own process group with the spec's environment plus
   ``RING_RESTART_COUNT`` (0, 1, ...);
2. keeps watching the spec (the same source as the first wait: the mounted
   file or, with ``--from-api``, the ConfigMap through the API);
3. when the spec leaves the epoch CMD was started with (a new epoch, whether
   already ``completed`` or ``initializing`` while a replacement pod comes
   up, or a new job incarnation), stops CMD: SIGTERM to its process group,
   then SIGKILL after ``--grace-period`` (TensorFlow traps SIGTERM and can
   hang waiting for a dead peer), and any process of the group still left;
4. waits (up to ``--timeout``) for the completed spec that still lists this
   pod and starts CMD again with the new environment; at most
   ``--max-restarts`` times, after which it exits 4;
5. forwards SIGTERM, SIGINT and SIGHUP to CMD's process group (SIGKILL after
   the grace period) and then exits with CMD's code;
6. exits with CMD's own code (128+N for signal N) when CMD ends by itself,
   except when CMD failed and the spec moves on by the end of one grace
   period (a peer died and the collective failed just before the new spec
   arrived): that counts as a restart like step 3.

Failure modes it handles: a peer pod deleted and recreated (same or new
name, new IP), a peer's IP or port changed, the job recreated under the same
name, a trainer that ignores SIGTERM. Failure modes it does not: this pod's
own container dying (the kubelet restarts it, and the new ``ring-launch``
waits for the spec as usual); a trainer that cannot resume (restart in place
only helps if the trainer restores from a checkpoint, which is its job);
peers that are not supervised (they must be restarted by someone, or the new
ring never forms); and, as PID 1, reaping orphans that CMD's children leave
behind (use ``shareProcessNamespace`` or an init such as tini in front if
CMD daemonises grandchildren). In file mode a change reaches the container
only at the kubelet's next volume sync (up to a minute or two): use
``--from-api``, or the controller's epoch annotation, for fast restarts.

The loop is event driven: a watcher thread posts every verdict of the spec, a
waiter thread posts CMD's exit, the signal handler posts signals, all into
one :class:`queue.SimpleQueue` (whose ``put`` is safe in a signal handler);
the main thread decides. No polling of CMD, no sleeps.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ranktable.clusterspec import ClusterSpec, PodNotInSpec, SpecError
from ranktable.exports import ExecLimitError
from ranktable.frozen import record
from ranktable.launch import exitcodes
from ranktable.launch.wait import Identity, Judge, Log, Ready, Source, quiet

if TYPE_CHECKING:
    from typing import Final, Union

#: Exit code when a restart is needed but ``--max-restarts`` are spent.
EXIT_RESTARTS_SPENT: Final = exitcodes.RESTARTS_SPENT
RESTART_COUNT_VAR: Final = "RING_RESTART_COUNT"
FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Far enough ahead to be "never" for a watch, finite for the sources' arithmetic.
_FOREVER: Final = 10 * 365 * 24 * 3600.0

SpecKey = tuple[str, int, int]


def spec_key(spec: ClusterSpec) -> SpecKey:
    """What identifies one membership: the job's uid and version, and the epoch."""
    return (spec.job.uid, spec.job.version, spec.epoch)


class Outcome(Exception):
    """The supervisor is done: ``code`` is the exit code, ``message`` why (may be empty)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code


@record
class _Verdict:
    verdict: Ready | str
    spec: ClusterSpec | None
    not_in: PodNotInSpec | None


@record
class _Exited:
    process: subprocess.Popen[bytes]
    code: int


@record
class _Signal:
    signum: int


@record
class _WatchFailed:
    error: BaseException


# For type checkers only (typing is not loaded at run time); Union, not `|`, as the launcher runs on Python 3.9.
if TYPE_CHECKING:
    _Event = Union[_Verdict, _Exited, _Signal, _WatchFailed]


def exit_code(returncode: int) -> int:
    """A Popen return code as a shell reports it (signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Runs ``command`` under the protocol of the module docstring; :meth:`run` returns the exit code.

    ``environment(ready)`` gives the variables for a ready spec (it may raise
    :class:`SpecError`; it may write files such as hostfiles). ``first`` is
    the ready spec the launcher already waited for. The caller must call
    :meth:`run` from the main thread (signal handlers are installed there)
    and only once.
    """

    def __init__(
        self,
        *,
        command: Sequence[str],
        source: Source,
        identity: Identity,
        first: Ready,
        environment: Callable[[Ready], Mapping[str, str]],
        grace: float,
        max_restarts: int,
        timeout: float,
        log: Log = quiet,
    ) -> None:
        self.command = list(command)
        self.source = source
        self.identity = identity
        self.first = first
        self.environment = environment
        self.grace = grace
        self.max_restarts = max_restarts
        self.timeout = timeout
        self._log = log
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._latest: _Verdict | None = None
        self.restarts = 0

    # The three producers ------------------------------------------------------

    def _watch(self) -> None:
        judge = Judge(identity=self.identity, where=self.source.where)
        try:
            for obs in self.source.observe(time.monotonic() + _FOREVER):
                verdict = judge.judge(obs)
                self._events.put(_Verdict(verdict=verdict, spec=judge.spec, not_in=judge.not_in))
        except BaseException as err:  # noqa: BLE001 - any end of the watch thread goes to the main thread, which decides
            self._events.put(_WatchFailed(err))

    def _wait_for(self, process: subprocess.Popen[bytes]) -> None:
        self._events.put(_Exited(process=process, code=process.wait()))

    def _on_signal(self, signum: int, frame: object) -> None:
        del frame
        self._events.put(_Signal(signum))

    # The decisions ----------------------------------------------------------------

    def run(self) -> int:
        """Supervise until done; the exit code (CMD's own, or one of the launcher's)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED_SIGNALS}
        threading.Thread(target=self._watch, name="ring-launch-watch", daemon=True).start()
        try:
            ready = self.first
            while True:
                ready = self._run_once(ready)
        except Outcome as done:
            if str(done):
                self._log(str(done))
            return done.code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self, ready: Ready) -> subprocess.Popen[bytes]:
        try:
            env = dict(os.environ)
            env.update(self.environment(ready))
        except SpecError as err:
            raise Outcome(65, f"error: {err}") from None
        except ExecLimitError as err:
            raise Outcome(exitcodes.EXEC_LIMIT, f"error: {err}") from None
        env[RESTART_COUNT_VAR] = str(self.restarts)
        self._log(
            f"{'start' if self.restarts == 0 else f'restart {self.restarts}'} (epoch {ready.spec.epoch}): "
            f"{' '.join(self.command)}"
        )
        try:
            process = subprocess.Popen(self.command, env=env, start_new_session=True)
        except FileNotFoundError:
            raise Outcome(127, f"error: command not found: {self.command[0]}") from None
        except PermissionError:
            raise Outcome(126, f"error: command not executable: {self.command[0]}") from None
        except OSError as err:
            raise Outcome(126, f"error: cannot start {self.command[0]}: {err}") from None
        threading.Thread(target=self._wait_for, args=(process,), name="ring-launch-wait", daemon=True).start()
        return process

    def _run_once(self, ready: Ready) -> Ready:
        """Run CMD for ``ready``; return the next ready spec to restart with, or raise :class:`Outcome`."""
        running = spec_key(ready.spec)
        process = self._start(ready)
        stopping: str | None = None  # "restart", "spent" or "signal"
        killer: threading.Timer | None = None
        interrupted: int | None = None
        moved = self._moved(running)
        if moved:
            stopping, killer = self._stop(process, f"the spec moved on ({moved}) before CMD started", restart=True)
        while True:
            event = self._events.get()
            if isinstance(event, _Verdict):
                self._latest = event
                moved = self._moved(running)
                if moved and stopping is None:
                    stopping, killer = self._stop(process, f"new membership: {moved}", restart=True)
            elif isinstance(event, _Signal):
                self._log(f"{signal.Signals(event.signum).name} received: forwarding to CMD")
                _signal_group(process, event.signum)
                if stopping in ("restart", "spent"):
                    interrupted = event.signum  # CMD is already going; leave once it has
                elif stopping is None:
                    stopping, killer = "signal", self._killer(process)
            elif isinstance(event, _WatchFailed):
                self._log(f"warning: watching the spec failed, no more restarts: {event.error}")
            elif event.process is process:
                if killer is not None:
                    killer.cancel()
                _signal_group(process, signal.SIGKILL)  # whatever CMD left in its group
                code = exit_code(event.code)
                self._log(f"CMD exited with {code}")
                if interrupted is not None:
                    raise Outcome(128 + interrupted, f"{signal.Signals(interrupted).name} while restarting CMD")
                if stopping == "signal":
                    raise Outcome(code)
                if stopping == "spent":
                    raise Outcome(EXIT_RESTARTS_SPENT, f"error: --max-restarts {self.max_restarts} spent")
                if stopping is None:
                    if code == 0 or not self._settle(running):
                        raise Outcome(code)
                    self._log(f"CMD failed after the membership changed ({self._moved(running)}): restarting")
                    if self.restarts >= self.max_restarts:
                        raise Outcome(EXIT_RESTARTS_SPENT, f"error: --max-restarts {self.max_restarts} spent")
                return self._next(running)

    def _settle(self, running: SpecKey) -> bool:
        """After CMD failed by itself: did the membership change, now or within the grace period?

        A trainer often notices a dead peer (and fails) moments before the
        controller's new spec arrives; waiting one grace period for it tells a
        peer loss (restart) from the trainer's own failure (exit with its code).
        """
        deadline = time.monotonic() + self.grace
        while not self._moved(running):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                return False
            if isinstance(event, _Verdict):
                self._latest = event
            elif isinstance(event, _Signal):
                raise Outcome(128 + event.signum, f"{signal.Signals(event.signum).name} after CMD failed")
        return True

    def _moved(self, running: SpecKey) -> str:
        """Why the latest spec is not the one CMD runs with, or "" if it still is (or is unknown)."""
        latest = self._latest
        if latest is None or latest.spec is None:
            return ""
        key = spec_key(latest.spec)
        if key == running:
            return ""
        spec = latest.spec
        return f"epoch {running[2]} -> {spec.epoch} ({spec.status}, {len(spec.members)}/{spec.expected} members)"

    def _stop(self, process: subprocess.Popen[bytes], why: str, *, restart: bool) -> tuple[str, threading.Timer | None]:
        """SIGTERM CMD's group and arm the SIGKILL; the new stopping state ("restart" or "spent")."""
        state = "restart"
        if restart and self.restarts >= self.max_restarts:
            self._log(f"{why}; --max-restarts {self.max_restarts} spent: stopping CMD for good")
            state = "spent"
        else:
            self._log(f"{why}: stopping CMD (SIGTERM, SIGKILL after {self.grace:g}s)")
        _signal_group(process, signal.SIGTERM)
        return state, self._killer(process)

    def _killer(self, process: subprocess.Popen[bytes]) -> threading.Timer:
        def kill() -> None:
            if process.returncode is None:
                self._log(f"CMD still running {self.grace:g}s after SIGTERM: SIGKILL")
                _signal_group(process, signal.SIGKILL)

        timer = threading.Timer(self.grace, kill)
        timer.daemon = True
        timer.start()
        return timer

    def _next(self, running: SpecKey) -> Ready:
        """Wait for a completed spec listing this pod at a membership other than ``running``."""
        self.restarts += 1
        deadline = time.monotonic() + self.timeout
        shown = ""
        while True:
            latest = self._latest
            if latest is not None and isinstance(latest.verdict, Ready) and spec_key(latest.verdict.spec) != running:
                return latest.verdict
            if latest is not None and isinstance(latest.verdict, str) and latest.verdict != shown:
                shown = latest.verdict
                self._log(f"waiting: {shown}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if latest is not None and latest.not_in is not None:
                    raise Outcome(3, f"error: {latest.not_in}")
                raise Outcome(124, f"error: timed out after {self.timeout:g}s waiting for the new spec")
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if isinstance(event, _Verdict):
                self._latest = event
            elif isinstance(event, _Signal):
                raise Outcome(128 + event.signum, f"{signal.Signals(event.signum).name} while waiting for the spec")
            elif isinstance(event, _WatchFailed):
                code = 65 if isinstance(event.error, SpecError) else 1
                raise Outcome(code, f"error: {type(event.error).__name__}: {event.error}")


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal CMD's process group (CMD leads it: ``start_new_session``)."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
