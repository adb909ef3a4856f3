"""Replay's fold spread over worker processes, each folding its share of the runs.

A run's projection depends on its own events alone, so the runs are dealt to the
workers by the run's part of the subject (``<namespace>.<name>``, the last two tokens)
and each worker's projections are exact. Decoding is most of replay's time
(docs/benchmarks.md): the workers decode in parallel while the parent reads the stream.

The workers are forked (on Linux, see ``START_METHOD``): they start in milliseconds with
every model already built, and they run only the decode and the fold (no logging, no
event loop, no lock the parent may hold). Each worker gets its batches in stream order,
through its own sender thread, so the parent's event loop never waits on a pipe.
"""

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.events import decode_event
from plnt_common.projection import ProjectionFold

MAX_WORKERS = 4
"""Beyond this the parent's reading, not the decoding, is what replay waits for."""
JOIN_S = 5.0
"""How long a worker whose pipe ended may take to exit, for its exit code."""

START_METHOD = "fork" if sys.platform == "linux" else "spawn"
"""Forked on Linux; elsewhere (fork is unsafe on macOS, absent on Windows) each worker
starts a fresh interpreter, which costs it about a second of imports."""
_CONTEXT = (
    multiprocessing.get_context("fork")
    if START_METHOD == "fork"
    else multiprocessing.get_context("spawn")
)

Batch = list[tuple[str, bytes, str]]
"""(subject, payload, traceparent) of stored events: see ``history.read_messages``."""
Share = list[bytes | tuple[bytes, str]]
"""What a worker is dealt: a payload, or (payload, traceparent) for a traced one, so an
untraced stream sends what it always did."""
"""(subject, payload) of each message, in stream order."""


def worker_count() -> int:
    """One worker per core this process may run on, up to ``MAX_WORKERS``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_WORKERS, cores or 1))


@dataclass(frozen=True)
class _Worker:
    process: BaseProcess
    pipe: Connection
    sender: ThreadPoolExecutor
    """Sends the worker its shares one after the other, off the event loop."""


class FoldWorkers:
    """Forked processes folding the events they are dealt; ``close`` always ends them."""

    def __init__(self, count: int) -> None:
        started: list[tuple[BaseProcess, Connection]] = []
        for index in range(count):
            started.append(_start(index, [pipe for _, pipe in started]))
        # the threads start after every fork: a child never inherits a half-held lock
        self._workers = [_Worker(process, pipe, ThreadPoolExecutor(1)) for process, pipe in started]

    def deal(self, batch: Batch) -> None:
        """Send each message to the worker of its run; returns at once."""
        workers = self._workers
        shares: list[Share] = [[] for _ in workers]
        for subject, payload, traceparent in batch:
            shares[hash(_run_of(subject)) % len(workers)].append(
                (payload, traceparent) if traceparent else payload
            )
        for index, share in enumerate(shares):
            if share:
                # a send to a dead worker fails in its future, unread: ``_finish`` reports
                # how the worker ended
                workers[index].sender.submit(workers[index].pipe.send, share)

    async def projections(self) -> dict[str, bytes]:
        """Every worker's projections, serialised, once each has folded all it was dealt.

        Raises ``PlntError`` when a worker failed or ended without its result.
        """
        loop = asyncio.get_running_loop()
        # each end marker queued behind the worker's shares; all workers finish at once
        finishing = [
            (worker.process, loop.run_in_executor(worker.sender, _finish, worker.pipe))
            for worker in self._workers
        ]
        folded: dict[str, bytes] = {}
        for process, finished in finishing:
            result = await finished
            if result is None:
                # a worker whose pipe ended is exiting: the bound only guards against a hang
                process.join(JOIN_S)  # pragma: no mutate
                raise PlntError(
                    f"replay: fold worker {process.name} ended without its result "
                    f"(exit code {process.exitcode}); the bucket was left as it was"
                )
            kind, value = result
            if kind == "error":
                raise PlntError(f"replay: fold worker {process.name} failed: {value}")
            folded.update(value)
        return folded

    def close(self) -> None:
        """End every worker (one that sent its result is exiting already), then the
        senders, then the pipes: no send is left writing to a closed descriptor."""
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.kill()
            worker.process.join()
        for worker in self._workers:
            # not mutated: sends left queued for a dead worker would fail at once anyway
            worker.sender.shutdown(cancel_futures=True)  # pragma: no mutate
            worker.pipe.close()


def _start(index: int, parent_ends: list[Connection]) -> tuple[BaseProcess, Connection]:
    parent_end, child_end = _CONTEXT.Pipe()
    # A forked worker inherits the parent's end of its own pipe and of those made before:
    # it closes them, so that it reads the end of its pipe once the parent is gone.
    # (a spawned worker inherits no descriptor: passing them would only copy them there)
    inherited = (*parent_ends, parent_end) if START_METHOD == "fork" else ()  # pragma: no mutate
    process = _CONTEXT.Process(
        target=_fold_share,
        args=(child_end, inherited),
        name=f"plnt-replay-{index}",
        # ended with the parent's interpreter should the parent never reach ``close``
        daemon=True,  # pragma: no mutate
    )
    # Ctrl-C held back over the fork: one arriving before the worker set its own
    # handling waits for it instead of reaching the parent's handler in the worker
    with _interrupts_held():
        process.start()
    child_end.close()
    return process, parent_end


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    if not hasattr(signal, "pthread_sigmask"):  # Windows: spawned workers, no mask
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _run_of(subject: str) -> str:
    """``<namespace>.<name>`` of ``plnt.evt.<type>.<namespace>.<name>`` (the type has dots,
    the names none)."""
    return ".".join(subject.rsplit(".", 2)[1:])


def _finish(pipe: Connection) -> tuple[str, Any] | None:
    """Tell the worker the stream ended; its ("ok", projections) or ("error", why), or
    None when it died without either."""
    with contextlib.suppress(OSError):  # gone already: what it sent first is still read
        pipe.send(None)
    try:
        result: tuple[str, Any] = pipe.recv()
    except (EOFError, OSError):
        return None
    return result


def _fold_share(pipe: Connection, inherited: tuple[Connection, ...]) -> None:
    """A worker: fold every share until the end marker, then send the projections."""
    # Ctrl-C ends the worker at once (the parent cleans up); the parent's signal wake-up
    # pipe is not the worker's to write to.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    for end in inherited:
        end.close()
    result: tuple[str, Any]
    try:
        result = ("ok", _fold_until_the_end(pipe))
    except EOFError:
        return  # the parent closed its end: the replay failed or was interrupted there
    except BaseException as exc:  # the parent reports it, in one line
        result = ("error", repr(exc))
    with contextlib.suppress(OSError):
        pipe.send(result)


def _fold_until_the_end(pipe: Connection) -> dict[str, bytes]:
    fold = ProjectionFold()
    while (share := pipe.recv()) is not None:
        for item in share:
            payload, traceparent = item if isinstance(item, tuple) else (item, "")
            try:
                event = decode_event(payload)
            except SpecInvalid:
                continue  # a poison message: history only, as the watcher treats it
            fold.add(event, traceparent=traceparent)
    return {key: p.model_dump_json().encode() for key, p in fold.projections().items()}
