"""Replay's fold: decode and fold stored payloads, in a forked child where the OS has fork.

Decoding and folding hold the GIL, so in one process they take turns with reading the
stream. A child forked at the start (it inherits the imported models, so it costs no
start-up) decodes and folds each batch while this process reads the next; only the raw
payloads go over the pipe, and only the serialised projections come back.
"""

import asyncio
import contextlib
import multiprocessing
from collections.abc import AsyncGenerator
from multiprocessing.connection import Connection

from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.events import decode_event
from plnt_common.projection import ProjectionFold

Folded = dict[str, bytes]
"""The bucket's key → the projection's stored bytes."""


def fold_payloads(fold: ProjectionFold, payloads: list[bytes]) -> None:
    for payload in payloads:
        try:
            event = decode_event(payload)
        except SpecInvalid:
            continue  # a poison message: history only, as the watcher treats it
        fold.add(event)


def serialised(fold: ProjectionFold) -> Folded:
    return {key: p.model_dump_json().encode() for key, p in fold.projections().items()}


async def fold_here(batches: AsyncGenerator[list[bytes], None]) -> tuple[Folded, int]:
    """(the folded projections, messages read), read and folded in turn."""
    fold = ProjectionFold()
    count = 0
    async for batch in batches:
        count += len(batch)
        fold_payloads(fold, batch)
    return serialised(fold), count


class FoldFailed(PlntError):
    """The fold's child process failed or died; the bucket was not touched."""


def _fold_received(conn: Connection, parents_end: Connection) -> None:
    """The child: fold each batch received until None, then send the projections back."""
    parents_end.close()  # inherited by the fork: open here, the parent's close is no EOF
    try:
        fold = ProjectionFold()
        while (batch := conn.recv()) is not None:
            fold_payloads(fold, batch)
        conn.send(serialised(fold))
    except BaseException as exc:  # the parent raises it: the child never fails silently
        # (an EOFError lands here too: the parent's read failed and it closed the pipe,
        # so this send fails and the parent raises its own error)
        with contextlib.suppress(OSError):
            conn.send(FoldFailed(f"replay's fold failed: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


async def fold_in_child(batches: AsyncGenerator[list[bytes], None]) -> tuple[Folded, int]:
    """``fold_here``'s result, with the decoding and folding done by a forked child."""
    # not the default context: from Python 3.14 that is forkserver, which imports anew
    context = multiprocessing.get_context("fork")  # pragma: no mutate
    ours, theirs = context.Pipe()
    child = context.Process(target=_fold_received, args=(theirs, ours))
    child.start()
    theirs.close()
    count = 0
    try:
        async with contextlib.aclosing(batches):
            async for batch in batches:
                count += len(batch)
                # blocks only while the child still folds the batch before: reading the
                # next one waits for it either way, and nothing else runs here meanwhile
                if not _handed(ours, batch):
                    break
            else:
                _handed(ours, None)
        # its projections, or why it failed: a child that failed sent that before it ended
        result: Folded | FoldFailed | None = await asyncio.to_thread(_answer, ours)
    finally:
        ours.close()  # a child still waiting for batches (the read failed) ends on it
        child.join(timeout=5)  # pragma: no mutate (how long a stuck child gets)
        if child.is_alive():
            child.kill()
            child.join()
    if result is None:
        raise FoldFailed(
            f"replay's fold process ended without an answer (exit code {child.exitcode})"
        )
    if isinstance(result, FoldFailed):
        raise result
    return result, count


def _handed(conn: Connection, batch: list[bytes] | None) -> bool:
    """Sent to the child; False when it is gone (said with its exit code by the caller)."""
    try:
        conn.send(batch)
    except OSError:
        # not mutated: True reads the rest of the stream for nothing, with the same answer
        return False  # pragma: no mutate
    return True


def _answer(conn: Connection) -> Folded | FoldFailed | None:
    try:
        answer: Folded | FoldFailed = conn.recv()
    except (EOFError, OSError):  # gone before answering, or mid-answer
        return None
    return answer


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()
