"""Process lifecycle events, delivered to the session that is attached.

The session reacts; this module only knows when:
- **exit**: an ``atexit`` handler (it runs before mpi4py's MPI_Finalize);
- **an abort coming**: an unhandled main-thread exception (``sys.excepthook``)
  or ``python -m mpi4py``'s abort status, after which no rank may enter a
  collective at exit;
- **SIGTERM**: a watcher thread woken through ``signal.set_wakeup_fd`` (a
  Python handler would run only when the main thread next executes bytecode,
  never while it is blocked in MPI), then the application's own handling;
- **fork**: in the child, every hook is detached. The child inherits neither
  the watcher (its wakeup pipe would wake the parent's watcher and kill the
  parent) nor the session (its exit would overwrite the parent's profile);
  a child that creates its own ``Profiler`` profiles itself, from scratch.

Hooks are process-wide, so their state is module state; it is installed on
first attach and torn down in a fork child. Docs: docs/api.md, "Lifecycle".
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
from typing import Any, Optional, Protocol

# Seconds the SIGTERM snapshot may take before the application's own handling goes on.
TERM_TIMEOUT = 5.0


class Target(Protocol):
    """What the attached session does on each event."""

    def at_exit(self, aborting: bool) -> None: ...

    def on_sigterm(self) -> None: ...

    def forked(self) -> None: ...


_target: Optional[Target] = None
_aborting = False           # an unhandled exception or a coming MPI_Abort
_process_hooks = False      # atexit, excepthook, at-fork: once per process, forks inherit them
_sigterm_hooked = False     # our SIGTERM handler and watcher: per process, not inherited
_previous_term: Any = None
_wakeup = -1                # the watcher's pipe: write end (our wakeup fd), read end
_read_end = -1
_term_done = threading.Event()      # the watcher finished a SIGTERM snapshot
_inherited = False          # the event map came from a profiled parent, by fork
_forked = False             # this process is a fork child of a profiled process
_term_was_blocked: Optional[bool] = None    # during fork(): SIGTERM's mask before


def attach(target: Target) -> None:
    """Deliver the lifecycle events to ``target`` (replacing any other)."""
    global _target
    _target = target
    _install_process_hooks()
    _install_sigterm()


def detach(target: Target) -> None:
    global _target
    if _target is target:
        _target = None


def aborting() -> bool:
    """Whether this process is about to abort (no collective at exit)."""
    return _aborting


def take_inherited() -> bool:
    """Whether the event map was inherited from a profiled parent by fork
    (once: the session that starts in the child resets it)."""
    global _inherited
    inherited, _inherited = _inherited, False
    return inherited


def forked_child() -> bool:
    """Whether this process was forked from a profiled parent whose session
    it must not touch (MPI, in particular, is the parent's)."""
    return _forked



def _install_process_hooks() -> None:
    global _process_hooks
    if _process_hooks:
        return
    _process_hooks = True
    atexit.register(_at_exit)
    os.register_at_fork(before=_block_term, after_in_parent=_unblock_term,
                        after_in_child=_after_fork_child)
    # A main-thread exception ends the rank (and the job); a thread's does not,
    # so only the former rules out the collective exit flush.
    sys.excepthook = _marking(sys.excepthook, lambda *args: True)
    # python -m mpi4py: MPI_Abort at exit is coming (Any: a module read by attribute name)
    run: Any = sys.modules.get("mpi4py.run")
    if run is not None and hasattr(run, "set_abort_status"):
        run.set_abort_status = _marking(run.set_abort_status, _abort_status)


def _abort_status(status) -> bool:
    """Whether mpi4py's ``set_abort_status(status)`` means MPI_Abort at exit."""
    if isinstance(status, SystemExit):
        status = status.code
    return status not in (0, None)


def _marking(hook, aborts):
    def wrapper(*args):
        global _aborting
        if aborts(*args):
            _aborting = True
        return hook(*args)
    return wrapper


def _at_exit() -> None:
    target = _target
    if target is not None:
        target.at_exit(_aborting)


# SIGTERM stays blocked across fork() until the child has detached the parent's
# wakeup pipe: a child killed at once (Process.terminate() right after start)
# would otherwise wake the parent's watcher, which would kill the parent.

def _block_term() -> None:
    global _term_was_blocked
    if _wakeup != -1:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _term_was_blocked = signal.SIGTERM in old


def _unblock_term() -> None:
    global _term_was_blocked
    if _term_was_blocked is False:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _term_was_blocked = None


def _after_fork_child() -> None:
    """In a fork child: detach everything the parent installed per process,
    then let a pending SIGTERM take its default course."""
    global _target, _wakeup, _read_end, _sigterm_hooked, _term_done, _inherited, _forked
    if _target is not None:
        _inherited = _forked = True
        target, _target = _target, None
        target.forked()
    if _wakeup != -1:
        try:
            current = signal.set_wakeup_fd(-1)
            if current not in (-1, _wakeup):      # someone else's: leave it
                signal.set_wakeup_fd(current)
        except ValueError:
            pass
        for fd in (_wakeup, _read_end):
            os.close(fd)
        _wakeup = _read_end = -1
    if _sigterm_hooked:
        try:
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, _previous_term)
        except (ValueError, TypeError):
            pass
        _sigterm_hooked = False
    _term_done = threading.Event()
    _unblock_term()


# -- SIGTERM ---------------------------------------------------------------------------
# Python's C-level handler writes the signal number to the wakeup fd at once,
# so the watcher thread snapshots, and applies the default action, without the
# main thread. The Python handler remains for a callable previous handler, and
# for when another wakeup fd (e.g. asyncio's) is in use.

def _install_sigterm() -> None:
    global _sigterm_hooked, _previous_term
    if _sigterm_hooked or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_hooked = True
    _previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
    if _previous_term is None:          # set from C: we cannot chain to it, treat as default
        _previous_term = signal.SIG_DFL
    _watch_sigterm()


def _watch_sigterm() -> None:
    global _wakeup, _read_end
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    other = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if other != -1:                     # the application's: keep it, no watcher
        signal.set_wakeup_fd(other)
        os.close(read_end)
        os.close(write_end)
        return
    _wakeup, _read_end = write_end, read_end
    threading.Thread(target=_watch, args=(read_end,), name="tinyprof-sigterm",
                     daemon=True).start()


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:         # our pipe is gone (closed under us): stop watching
            return
        if signal.SIGTERM in data:
            _term_snapshot()
            if _previous_term == signal.SIG_DFL:
                _die()
            _term_done.set()


def _term_snapshot() -> None:
    target = _target
    if target is not None:
        target.on_sigterm()


def _die() -> None:
    """Die by SIGTERM from any thread (``signal.signal`` is main-thread only)."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGTERM, ctypes.c_void_p(0))        # SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigterm(signum, frame) -> None:
    current = signal.set_wakeup_fd(_wakeup)
    if _wakeup == -1 or current != _wakeup:     # no watcher saw this signal
        signal.set_wakeup_fd(current)
        _term_snapshot()
    else:
        _term_done.wait(TERM_TIMEOUT + 1)
    _term_done.clear()
    previous = _previous_term
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:         # the default action: die by SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
