"""``plnt``: argument parsing and the one place errors become a single line for the user."""

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from plnt_cli import arguments, commands, publish, runner, shadow
from plnt_cli.locate import resolve_nats_url
from plnt_cli.move import move
from plnt_cli.operate import operate
from plnt_cli.serve import SERVICES, service_main
from plnt_common import event_loop
from plnt_common.errors import PlntError
from plnt_common.logs import configure_logging
from plnt_common.names import DEFAULT_NAMESPACE
from plnt_common.nats_server import LOCAL_SYNC_INTERVAL, checked_sync_interval
from plnt_common.operations import Operation

T = TypeVar("T")


def say(line: str) -> None:
    print(line, flush=True)


def tell(line: str) -> None:
    """Progress, on stderr: stdout keeps only the results a script reads."""
    print(line, file=sys.stderr, flush=True)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, one_line(f"plnt: {message} (see {self.prog} --help)") + "\n")


def one_line(message: str) -> str:
    """``message`` with control characters escaped: input a user typed stays on its line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in message)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="plnt", description="Ship AI agent workflows: deploy saga, router and runner."
    )
    parser.add_argument(
        "--nats", help="NATS URL (default: PLNT_NATS_URL, else the running `plnt up`)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run the embedded stack in the foreground")
    up.add_argument("--data-dir", type=Path, help="store and logs (default ~/.plnt/data)")
    up.add_argument(
        "--router-port",
        type=arguments.port_number,
        help="router port (default 8080, or a free one if taken)",
    )
    up.add_argument(
        "--console-port",
        type=arguments.port_number,
        help="web console port (default 8081, or a free one if taken; see docs/console.md)",
    )
    up.add_argument(
        "--nats-port",
        type=arguments.port_number,
        help="NATS port (default 4222, or a free one if taken)",
    )
    up.add_argument(
        "--replicas",
        type=arguments.replica_count,
        default=1,
        help=f"replicas of each saga service, 1 to {arguments.MAX_REPLICAS} (default 1)",
    )
    up.add_argument(
        "--nats-sync-interval",
        default=LOCAL_SYNC_INTERVAL,
        metavar="INTERVAL",
        help=f"how often NATS fsyncs its store: a duration, or 'always' to fsync every write "
        f"(default {LOCAL_SYNC_INTERVAL}; see docs/reliability.md)",
    )
    up.add_argument(
        "--nats-cluster",
        type=int,
        choices=(1, 3, 5),
        default=1,
        metavar="NODES",
        help="run NATS as a local cluster of 1, 3 or 5 nodes, every stream replicated "
        "on each (default 1; for trying node failures)",
    )

    demo = sub.add_parser("demo", help="up + publish the example + apply + wait + invoke + print")
    demo.add_argument(
        "--data-dir", type=Path, help="keep state here instead of a fresh temporary dir"
    )
    demo.add_argument("--router-port", type=arguments.port_number)
    demo.add_argument("--nats-port", type=arguments.port_number)
    demo.add_argument("--keep", action="store_true", help="keep the temporary data dir")

    apply = sub.add_parser("apply", help="create or update resources from a file")
    apply.add_argument(
        "-f",
        "--filename",
        required=True,
        help="YAML or JSON file, a directory of *.yaml/*.yml files, or - for stdin",
    )
    apply.add_argument("-n", "--namespace", type=arguments.namespace, default=None)

    get = sub.add_parser("get", help="list or show workflowruns or backends")
    get.add_argument(
        "kind", nargs="?", default="workflowruns", help="workflowruns (wr) or backends"
    )
    get.add_argument("name", nargs="?")
    get.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)
    get.add_argument("-o", "--output", choices=["json", "yaml"])

    delete = sub.add_parser("delete", help="delete a workflowrun (waits for cleanup) or backend")
    delete.add_argument("kind")
    delete.add_argument("name")
    delete.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)
    delete.add_argument(
        "--timeout", default="60s", help="how long to wait for cleanup; 0 = do not wait"
    )

    wait = sub.add_parser("wait", help="wait for a workflowrun phase")
    wait.add_argument("kind")
    wait.add_argument("name")
    wait.add_argument("--for", dest="condition", required=True, help="phase=<Phase> or delete")
    wait.add_argument("--timeout", default="60s")
    wait.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)

    history = sub.add_parser("history", help="the event timeline of a workflowrun, from the stream")
    history.add_argument("name", type=arguments.run_name)
    history.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)

    shadowed = sub.add_parser(
        "shadow", help="a workflowrun's shadow figures and its least similar pairs"
    )
    shadowed.add_argument("name", type=arguments.run_name)
    shadowed.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)
    shadowed.add_argument("-o", "--output", choices=["json", "yaml"], help="status.shadow whole")

    sub.add_parser("replay", help="rebuild the plnt-runs projection from the stream")

    operations = {
        Operation.PROMOTE: "pass the manual gate (Paused) and promote the canary now",
        Operation.ABORT: "roll the in-flight canary back now (RolledBack, reason Aborted)",
        Operation.ROLLBACK: "move traffic back to the kept previous revision now (Reverted)",
    }
    for operation, help_text in operations.items():
        operate_parser = sub.add_parser(operation.value, help=help_text)
        operate_parser.add_argument("name", type=arguments.run_name)
        operate_parser.add_argument(
            "-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE
        )
        if operation is Operation.PROMOTE:
            operate_parser.add_argument(
                "--full", action="store_true", help="skip the remaining canary steps"
            )

    moved = sub.add_parser(
        "move", help="run a workflowrun on another backend, Ready there before retired here"
    )
    moved.add_argument("name", type=arguments.run_name)
    moved.add_argument("--to", required=True, metavar="BACKEND", help="the PlntBackend to run on")
    moved.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)
    moved.add_argument(
        "--timeout", default="10m", help="how long to wait for the rollout there (default 10m)"
    )

    invoke = sub.add_parser("invoke", help="call a workflow through the router")
    invoke.add_argument("name", type=arguments.run_name)
    invoke.add_argument("--data", default="{}", help="JSON body, or @file")
    invoke.add_argument("--stream", action="store_true", help="ask for server-sent events")
    invoke.add_argument(
        "--trace", action="store_true", help="print the call's trace id (tracing must be on)"
    )
    invoke.add_argument("-n", "--namespace", type=arguments.namespace, default=DEFAULT_NAMESPACE)

    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=sorted(SERVICES))
    serve.add_argument(
        "--backend",
        metavar="NAME",
        help="local-backend only: serve the `local` PlntBackend NAME alone (its releases, its "
        "own state dir); without it, every release (PLNT_LOCAL_BACKEND_BACKEND)",
    )

    runner.add_parser(sub)
    publish.add_parsers(sub)
    return parser


async def with_session(
    nats_flag: str | None, work: Callable[[commands.Session], Awaitable[T]]
) -> T:
    session = await commands.Session.open(resolve_nats_url(nats_flag))
    try:
        return await work(session)
    finally:
        await session.close()


def dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "serve":
        service_main(args.service, backend=args.backend)()
        return 0
    if command == "up":
        from plnt_cli.up import run_up, stack_config

        config = stack_config(
            data_dir=args.data_dir,
            nats_port=args.nats_port,
            router_port=args.router_port,
            replicas=args.replicas,
            say=say,
            nats_sync_interval=sync_interval_argument(args.nats_sync_interval),
            nats_cluster=args.nats_cluster,
            console_port=args.console_port,
        )
        return run_up(config, say=say)
    if command == "runner":
        return runner.run_check(args, say=say)
    if command in ("keygen", "publish"):
        return publish.run(args, say=say, tell=tell)
    if command == "demo":
        from plnt_cli.demo import run_demo

        return run_demo(
            data_dir=args.data_dir,
            nats_port=args.nats_port,
            router_port=args.router_port,
            keep=args.keep,
            say=say,
        )
    return event_loop.run(dispatch_bus_command(args))


async def dispatch_bus_command(args: argparse.Namespace) -> int:
    nats: str | None = args.nats
    command = args.command
    if command == "apply":
        lines = await with_session(nats, lambda s: commands.apply(s, args.resources))
        for line in lines:
            say(line)
    elif command == "get":
        say(
            await with_session(
                nats,
                lambda s: commands.get(
                    s,
                    kind_word=args.kind,
                    name=args.name,
                    namespace=args.namespace,
                    output=args.output,
                ),
            )
        )
    elif command == "delete":
        await with_session(
            nats,
            lambda s: commands.delete(
                s,
                kind_word=args.kind,
                name=args.name,
                namespace=args.namespace,
                wait_s=args.timeout,
                say=say,
            ),
        )
    elif command == "wait":
        return await wait_command(args)
    elif command == "history":
        say(
            await with_session(
                nats, lambda s: commands.history(s, name=args.name, namespace=args.namespace)
            )
        )
    elif command == "shadow":
        say(
            await with_session(
                nats,
                lambda s: shadow.shadow(
                    s, name=args.name, namespace=args.namespace, output=args.output
                ),
            )
        )
    elif command == "replay":
        stats = await with_session(nats, commands.replay)
        rate = stats.events / stats.seconds if stats.seconds else 0.0
        say(
            f"replayed {stats.events} events into {stats.runs} runs "
            f"in {stats.seconds:.2f}s ({rate:,.0f} events/s)"
        )
    elif command == "invoke":
        return await invoke_command(args)
    elif command == "move":
        say(
            await with_session(
                nats,
                lambda s: move(
                    s,
                    name=args.name,
                    namespace=args.namespace,
                    to=args.to,
                    say=say,
                    wait_s=args.timeout,
                ),
            )
        )
    elif command in {op.value for op in Operation}:
        say(
            await with_session(
                nats,
                lambda s: operate(
                    s,
                    Operation(command),
                    name=args.name,
                    namespace=args.namespace,
                    full=bool(getattr(args, "full", False)),
                    say=say,
                ),
            )
        )
    return 0


async def wait_command(args: argparse.Namespace) -> int:
    kind: str = args.kind
    key, value = args.condition
    timeout: float = args.timeout

    async def work(session: commands.Session) -> None:
        if key == "delete":
            was_there = await commands.wait_until_gone(
                session, kind=kind, namespace=args.namespace, name=args.name, timeout_s=timeout
            )
            say(f"workflowrun.plnt.work/{args.name} {'deleted' if was_there else 'not found'}")
        else:
            await commands.wait_for_phase(
                session,
                name=args.name,
                namespace=args.namespace,
                phase=value,
                timeout_s=timeout,
                say=say,
            )
            say(f"workflowrun.plnt.work/{args.name} condition met")

    await with_session(args.nats, work)
    return 0


async def invoke_command(args: argparse.Namespace) -> int:
    async def work(session: commands.Session) -> commands.Invoked:
        return await commands.invoke(
            session, name=args.name, namespace=args.namespace, body=args.data, stream=args.stream
        )

    answer = await with_session(args.nats, work)
    say(answer.text.rstrip())
    print(f"(HTTP {answer.status}, revision {answer.revision or '-'})", file=sys.stderr)
    if args.trace:
        print(trace_line(answer), file=sys.stderr)
    return 0 if answer.status < 400 else 1


def trace_line(answer: commands.Invoked) -> str:
    """What ``plnt invoke --trace`` prints: the call's trace id, or why there is none."""
    if answer.trace_id:
        return f"trace {answer.trace_id}"
    return (
        "trace: none (the router records no traces; start `plnt up` with "
        "OTEL_EXPORTER_OTLP_ENDPOINT set, see docs/observability.md)"
    )


def sync_interval_argument(text: str) -> str:
    try:
        return checked_sync_interval(text)
    except ValueError as exc:
        raise PlntError(f"--nats-sync-interval: {exc}") from None


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command != "serve":  # services configure their own logging
        configure_logging(level="warning", fmt="console")
    try:
        code = dispatch(arguments.check_arguments(args))
    except PlntError as exc:
        print(one_line(f"plnt: {exc}"), file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        if os.environ.get("PLNT_DEBUG"):
            raise
        print(
            f"plnt: unexpected {type(exc).__name__}: {exc} (PLNT_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        code = 1
    sys.exit(code)
