"""Executors for sweep points: serial, a local process pool, or a Ray cluster.

All three share one tiny protocol, ``map(fn, items) -> iterator of results`` in
completion order; the caller matches results to points by their key. ``fn`` must be
a module-level function (it is pickled by reference), so the same code runs
everywhere and results are equal whichever executor ran them. Ray is imported only
when the Ray executor is used (``pip install 'csa-plan[ray]'``).
"""

from __future__ import annotations

import itertools
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol

from csa_plan.planner.errors import BadInput


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]: ...


@dataclass(frozen=True)
class SerialExecutor:
    name: str = "serial"
    workers: int = 1

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            yield fn(item)


@dataclass(frozen=True)
class LocalPoolExecutor:
    """A spawn-context process pool: workers import csa_plan afresh and cache what they load."""

    workers: int = 0  # 0: every local core
    name: str = "local pool"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        items = list(items)
        if not items:
            return
        n = min(self.workers or os.cpu_count() or 1, len(items))
        pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=die_with_parent, initargs=(os.getpid(),))
        finished = False
        try:
            # A bounded window keeps memory flat and lets an interrupt cancel what has not started.
            pending, queue = set(), iter(items)
            for item in itertools.islice(queue, 2 * n):
                pending.add(pool.submit(fn, item))
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
                    nxt = next(queue, _END)
                    if nxt is not _END:
                        pending.add(pool.submit(fn, nxt))
            finished = True
        finally:
            if not finished:  # interrupted, terminated or failed: the points still running are not waited for
                _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)


_END = object()


def _stop_workers(pool: Any) -> None:
    for process in list(getattr(pool, "_processes", {}).values()):  # CPython's pool keeps them by pid
        try:
            process.terminate()
        except (OSError, ValueError, AttributeError):
            pass


# -- workers die with their parent ---------------------------------------------------------------

PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCHDOG_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """A pool worker's first act: end when the sweep process ends, however it ends (SIGTERM,
    SIGHUP, SIGKILL of the parent alone, which no handler in the parent can see).

    Two mechanisms: on Linux the kernel's parent-death signal (``prctl(PR_SET_PDEATHSIG,
    SIGKILL)`` through ctypes; the parent may have died before it was set, so the parent's
    pid is checked after); everywhere, a watchdog thread that ends the worker once it has
    been re-parented. The multiprocessing resource tracker then sees its last writer go
    and ends too.
    """
    import signal
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the watchdog alone
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCHDOG_S)
        os._exit(1)

    threading.Thread(target=watch, name="csa-plan-parent-watchdog", daemon=True).start()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a sweep: handled as an interrupt (finished points kept, workers
    stopped), never as an abrupt exit that would leave the pool behind."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread for the duration (elsewhere
    signals cannot be handled: nothing changes)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    names = [name for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    saved = {name: signal.signal(getattr(signal, name), handler) for name in names}
    try:
        yield
    finally:
        for name, previous in saved.items():
            signal.signal(getattr(signal, name), previous)


@dataclass(frozen=True)
class RayExecutor:
    """Tasks on a Ray cluster: ``address`` is ``auto``, ``HOST:PORT``, ``ray://HOST:PORT``
    (checked first: ``ray_address.prepare``), or None for an already initialized (or a fresh
    local) Ray. Workers need csa_plan installed and the workload file at the same path."""

    address: str | None = None
    name: str = "ray"
    workers: int = 0

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        from csa_plan.planner.sweep.ray_address import prepare

        address = prepare(self.address)  # before Ray is imported: it reads RAY_AUTH_MODE then
        try:
            import ray
        except ImportError:
            raise BadInput("options", "--ray", "Ray is not installed (pip install 'csa-plan[ray]')") from None
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise BadInput("options", "--ray", f"cannot connect to Ray at {self.address!r}: {exc}") from None
        remote = ray.remote(num_cpus=1)(fn)
        refs = [remote.remote(item) for item in items]
        try:
            while refs:
                done, refs = ray.wait(refs, num_returns=1)
                yield ray.get(done[0])
        finally:
            for ref in refs:
                ray.cancel(ref)


def make_executor(jobs: int | None, ray_address: str | None) -> Executor:
    """--ray wins; --jobs 1 is the serial loop; otherwise a pool over ``jobs`` (0: all) cores."""
    if ray_address is not None:
        return RayExecutor(address=ray_address)
    if jobs == 1:
        return SerialExecutor()
    return LocalPoolExecutor(workers=jobs or 0)
