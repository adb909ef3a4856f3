"""``python -m bench.fake_llm --latency-ms N [--backlog N]``: the test suite's ``FakeLLM``
as a process.

The runner figures put the fake LLM on the load core, away from the executor it serves,
so its own CPU time does not slow the system under test. It prints ``listening on
<base_url>`` (the URL ends in ``/v1``) and serves until terminated.
"""

import argparse
import asyncio
import contextlib

from plnt_testkit.fake_llm import FakeLLM


async def serve(latency_s: float, backlog: int) -> None:
    async with FakeLLM(latency_s=latency_s, backlog=backlog) as llm:
        print(f"listening on {llm.base_url}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fake_llm")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument(
        "--backlog", type=int, default=128, help="accept queue of the listening socket"
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.latency_ms / 1000, args.backlog))


if __name__ == "__main__":
    main()
