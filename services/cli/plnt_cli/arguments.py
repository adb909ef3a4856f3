"""Checking the CLI's arguments, all of them before any command acts.

Argument types for argparse (a bad value is then a one-line usage error), and
``check_arguments`` for what depends on more than one argument (a name's rules depend on
its kind) or reads a file. Names and namespaces become NATS subject tokens and KV keys,
so they are checked here, before anything reaches the bus.
"""

import argparse
import json
from pathlib import Path
from typing import Any

from plnt_cli.commands import parse_condition, parse_duration, resolve_kind
from plnt_cli.documents import parse_documents, path_kind, read_documents
from plnt_common.errors import SpecInvalid
from plnt_common.names import check_dns_label, check_namespace, check_run_name

MAX_REPLICAS = 16
"""Each replica is one process per saga service, on one machine."""


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not between 1 and 65535")
    return port


def replica_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= count <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"{count} replicas: use 1 to {MAX_REPLICAS}")
    return count


def namespace(text: str) -> str:
    try:
        return check_namespace(text)
    except SpecInvalid as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_name(text: str) -> str:
    try:
        return check_run_name(text)
    except SpecInvalid as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resource_name(kind: str, name: str) -> str:
    """A WorkflowRun name (at most 40 characters) or a PlntBackend name (63)."""
    if kind == "WorkflowRun":
        return check_run_name(name)
    return check_dns_label(name, what=f"{kind} name")


def check_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """Check and normalise ``args`` in place; raises ``SpecInvalid`` naming the argument.

    After it: ``kind`` is the resolved kind, ``timeout`` seconds, ``condition`` a
    ``(key, value)`` pair, ``data`` the decoded JSON body, and ``resources`` what
    ``apply`` will apply, read and validated before any connection is made.
    """
    command = args.command
    if command == "apply":
        args.resources = parse_documents(read_documents(args.filename), namespace=args.namespace)
    if command in ("get", "delete", "wait"):
        args.kind = resolve_kind(args.kind)
        if args.name is not None:
            resource_name(args.kind, args.name)
    if command in ("delete", "wait", "move"):
        args.timeout = parse_duration(args.timeout)
    if command == "move":
        resource_name("PlntBackend", args.to)
    if command == "wait":
        if args.kind != "WorkflowRun":
            raise SpecInvalid("wait works on workflowruns")
        args.condition = parse_condition(args.condition)
    if command == "invoke":
        args.data = json_body(read_data_argument(args.data))
    if command in ("up", "demo") and args.data_dir is not None:
        ensure_directory(args.data_dir, what=f"--data-dir {args.data_dir}")
    return args


def ensure_directory(path: Path, *, what: str) -> None:
    """Create ``path`` if need be (``up`` would at once); refuse what cannot be one."""
    if path_kind(path, what=what) == "file":
        raise SpecInvalid(f"{what}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecInvalid(f"{what}: cannot create it: {exc.strerror or exc}") from None


def read_data_argument(data: str) -> str:
    """``--data JSON`` or ``--data @file``."""
    if not data.startswith("@"):
        return data
    path = Path(data[1:])
    kind = path_kind(path, what=f"--data {data}")
    if kind != "file":
        raise SpecInvalid(
            f"--data {data}: {'a directory' if kind == 'directory' else 'no such file'}"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecInvalid(f"--data {data}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise SpecInvalid(f"--data {data}: cannot read it: {exc.strerror or exc}") from None


def json_body(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecInvalid(f"--data is not valid JSON: {exc.msg} at position {exc.pos}") from None
