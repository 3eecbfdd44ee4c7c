"""Process lifecycle events, delivered to the session that is attached.

The session reacts; this module only knows when:
- **exit**: an ``atexit`` handler (it runs before mpi4py's MPI_Finalize);
- **an abort coming**: an unhandled main-thread exception (``sys.excepthook``)
  or ``python -m mpi4py``'s abort status, after which no rank may enter a
  collective at exit;
- **SIGTERM**: a watcher thread woken through ``signal.set_wakeup_fd`` (a
  Python handler would run only when the main thread next executes bytecode,
  never while it is blocked in MPI), then the application's own handling:
  whoever installed a handler last gets the signal (a Python handler set
  after ours, or the one before ours: Python's, the default action, or a C
  handler, saved and put back). tinyprof's threads block the asynchronous
  signals, so that the application's threads get them (``sigwait``);
- **fork**: in the child, every hook is detached. The child inherits neither
  the watcher (its wakeup pipe would wake the parent's watcher and kill the
  parent) nor the session (its exit would overwrite the parent's profile);
  a child that creates its own ``Profiler`` profiles itself, from scratch.

Hooks are process-wide, so their state is module state; it is installed on
first attach and torn down in a fork child. Docs: docs/api.md, "Lifecycle".
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
import warnings
from typing import Any, Iterator, Optional, Protocol

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
_previous_term: Any = None     # the handler before ours: Python's, SIG_DFL, SIG_IGN or _CHandler
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
                if isinstance(_previous_term, _CHandler):
                    _previous_term.restore()
                else:
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
    """Hook SIGTERM, from the main thread (``signal.signal`` works only there):
    at once, or, for a Profiler created in another thread, as a pending call
    that the main thread runs between its next bytecodes."""
    global _sigterm_hooked
    if _sigterm_hooked:
        return
    _sigterm_hooked = True
    if threading.current_thread() is threading.main_thread():
        _hook_sigterm()
        return
    _pending.append(_PENDING(_pending_hook))        # kept alive while queued
    ctypes.pythonapi.Py_AddPendingCall.argtypes = [_PENDING, ctypes.c_void_p]
    ctypes.pythonapi.Py_AddPendingCall(_pending[-1], None)


_PENDING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_pending: list = []


def _pending_hook(arg: Any) -> int:
    try:
        _hook_sigterm()
    except Exception as e:      # never into the application, whose bytecode this interrupts
        warnings.warn(f"tinyprof: SIGTERM is not watched: {type(e).__name__}: {e}",
                      RuntimeWarning, stacklevel=1)
    return 0


class _CHandler:
    """A handler installed from C before Python started (``getsignal`` gives
    None): its ``struct sigaction``, saved as opaque bytes, to hand the signal
    back to it."""

    def __init__(self) -> None:
        self.action = ctypes.create_string_buffer(512)    # >= sizeof(struct sigaction)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.sigaction(signal.SIGTERM, None, self.action)

    def restore(self) -> None:
        self.libc.sigaction(signal.SIGTERM, self.action, None)


def _hook_sigterm() -> None:
    global _previous_term
    if not _sigterm_hooked or signal.getsignal(signal.SIGTERM) is _on_sigterm:
        return                  # detached meanwhile (a fork child), or hooked already
    c_handler = _CHandler() if signal.getsignal(signal.SIGTERM) is None else None
    _previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
    if _previous_term is None:
        _previous_term = c_handler
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
    start_thread(_watch, (read_end,), "tinyprof-sigterm")


# Signals a thread of tinyprof never takes: the kernel hands a process-directed
# signal to any thread that does not block it, and an application that blocks
# one to collect it with sigwait() must get it, not our thread.
_KEPT = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
         signal.SIGTRAP, signal.SIGSYS}


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """The asynchronous signals blocked in this thread meanwhile: the threads
    started meanwhile (ours, and those of libraries that tinyprof loads, as
    OpenBLAS under numpy or an MPI library) inherit the mask, and never take
    a signal from the application's threads."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _KEPT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_thread(target: Any, args: tuple, name: str) -> threading.Thread:
    """Start a daemon thread of tinyprof's, with the asynchronous signals blocked."""
    with signals_blocked():
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
    return thread


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:         # our pipe is gone (closed under us): stop watching
            return
        if signal.SIGTERM in data:
            _term_snapshot()
            # Whoever installed a handler last gets the signal: a Python handler
            # set after ours runs in the main thread by itself; ours hands over.
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                _hand_over(None)
                _term_done.set()        # for _on_sigterm, which waits for it


def _hand_over(frame: Any) -> None:
    """Apply the handling that was there before ours: the default action
    (die by SIGTERM), a C handler (back in place, the signal raised again:
    the C handler has it from then on), or, in the main thread (``frame``),
    a Python handler; SIG_IGN: nothing."""
    previous = _previous_term
    if previous == signal.SIG_DFL:
        _die()
    elif isinstance(previous, _CHandler):
        previous.restore()
        os.kill(os.getpid(), signal.SIGTERM)
    elif callable(previous) and frame is not None:
        previous(signal.SIGTERM, frame)


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
        _hand_over(frame)
    else:           # the watcher took the snapshot and applied any other handling
        _term_done.wait(TERM_TIMEOUT + 1)
        _term_done.clear()
        if callable(_previous_term):
            _previous_term(signum, frame)
