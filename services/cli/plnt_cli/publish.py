"""``plnt keygen`` and ``plnt publish``: the push path of a Workflow spec into a registry.

``publish`` reads a spec (a file, or a folder holding ``workflow.yaml``), packs the folder's
``src/`` into the code archive when the spec declares ``runtime.code`` (reproducibly, its
digest written into the published spec), validates the result with the puller's own
parser, signs it when asked, and hands the files to a ``PublishTarget``. It refuses to
replace a published version with other bytes unless forced. Errors are ``PlntError``s
with one-line messages; ``plnt_cli.main`` prints them.
"""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from plnt_cli.publish_targets import PublishTarget, target_for
from plnt_common.code_archive import MAX_ARCHIVE_BYTES, archive_digest, check_archive, pack_archive
from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.signatures import (
    KeyInvalid,
    SecretKey,
    generate,
    key_id_hex,
    parse_secret_key,
    sign,
)
from plnt_common.signatures import verify as verify_signature
from plnt_common.workflow import Workflow, parse_workflow, spec_digest
from plnt_puller.ports import SIGNATURE_FILE, SPEC_FILE

SOURCE_DIR = "src"
"""The folder beside workflow.yaml whose contents become the code archive's root."""

SKIPPED = frozenset({"__pycache__"})
"""Directories never packed besides hidden ones (``.git``, ``.venv``, tool caches): what
differs between machines, or holds an environment rather than the code."""


class PublishRefused(PlntError):
    """The registry holds other bytes under this version (``--force`` replaces them)."""

    reason = "PublishRefused"


@dataclass(frozen=True)
class Published:
    """What ``publish`` did: the values to pin, and whether anything was written."""

    ref: str
    registry: str
    integrity_hash: str
    code_digest: str | None
    signed_by: str | None
    uploaded: tuple[str, ...]


# --- keygen -------------------------------------------------------------------------------


def keygen(prefix: Path) -> tuple[Path, Path, str]:
    """Write ``PREFIX.key`` (mode 0600, unencrypted minisign secret key) and ``PREFIX.pub``;
    returns both paths and the ``RW...`` public key. Never overwrites a file."""
    secret_path, public_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for path in (secret_path, public_path):
        if path.exists():
            raise PlntError(f"{path} exists; keygen does not overwrite keys (move it away first)")
    key = generate()
    _write_new(secret_path, key.file_text().encode(), mode=0o600)
    _write_new(public_path, key.public().file_text().encode(), mode=0o644)
    return secret_path, public_path, key.public().encoded()


def _write_new(path: Path, data: bytes, *, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise PlntError(f"{path} exists; keygen does not overwrite keys") from None
    except OSError as exc:
        raise PlntError(f"cannot write {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)  # the umask may have narrowed or the file system widened it


def load_secret_key(path: Path) -> SecretKey:
    """The minisign secret key in ``path``; raises ``KeyInvalid`` naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyInvalid(f"cannot read the signing key {path}: {exc}") from None
    return parse_secret_key(text, what=f"signing key {path}")


# --- publish ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """The files of one version as they will be published."""

    workflow: Workflow
    files: dict[str, bytes]

    @property
    def spec(self) -> bytes:
        return self.files[SPEC_FILE]


def prepare(source: Path) -> Prepared:
    """The spec at ``source`` (a file, or a folder with ``workflow.yaml``) and its code
    archive, validated as the puller validates them; raises ``SpecInvalid``/``CodeInvalid``."""
    spec_file = source / SPEC_FILE if source.is_dir() else source
    try:
        raw = spec_file.read_bytes()
    except OSError as exc:
        raise SpecInvalid(f"cannot read {spec_file}: {exc.strerror or exc}") from None
    document = _code_section(raw)
    if document is None:
        return Prepared(workflow=_validated(raw, spec_file), files={SPEC_FILE: raw})
    root, code = document
    archive = pack_archive(_source_files(spec_file.parent / SOURCE_DIR))
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise SpecInvalid(
            f"{spec_file.parent / SOURCE_DIR} packs to {len(archive)} bytes, "
            f"over the {MAX_ARCHIVE_BYTES}-byte bound of a code archive"
        )
    digest = archive_digest(archive)
    if code.get("digest") == digest:
        published = raw  # already pinned: publish the user's bytes unchanged
    else:
        code["digest"] = digest
        published = yaml.safe_dump(root, sort_keys=False, allow_unicode=True).encode()
    workflow = _validated(published, spec_file)
    assert workflow.spec.runtime.code is not None
    check_archive(archive, digest=digest, name=f"the archive of {spec_file.parent / SOURCE_DIR}")
    return Prepared(
        workflow=workflow, files={SPEC_FILE: published, workflow.spec.runtime.code.archive: archive}
    )


def _validated(raw: bytes, spec_file: Path) -> Workflow:
    try:
        return parse_workflow(raw)
    except SpecInvalid as exc:
        raise SpecInvalid(f"{spec_file}: {exc}") from None


def _code_section(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The spec document and its ``spec.runtime.code`` mapping, None without one (the
    spec's other problems are left to ``parse_workflow``)."""
    try:
        root = yaml.safe_load(raw)
    except yaml.YAMLError:
        return None
    code = root
    for key in ("spec", "runtime", "code"):
        code = code.get(key) if isinstance(code, dict) else None
    if not isinstance(code, dict):
        return None
    return root, code


def _source_files(directory: Path) -> dict[str, bytes]:
    """Every regular file under ``directory`` by its relative POSIX path; raises
    ``SpecInvalid`` when it is missing or holds a link."""
    if not directory.is_dir():
        raise SpecInvalid(
            f"the spec declares runtime.code, and {directory} (packed into the archive) "
            "is not a directory"
        )
    files: dict[str, bytes] = {}
    for current, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        here = Path(current)
        for entry in [*dirs, *names]:
            if (here / entry).is_symlink():
                raise SpecInvalid(
                    f"{here / entry} is a symbolic link; the archive holds files only"
                )
        for name in names:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = here / name
            files[path.relative_to(directory).as_posix()] = path.read_bytes()
    if not files:
        raise SpecInvalid(f"{directory} holds no files to pack")
    return files


def publish(
    source: Path,
    *,
    registry: str,
    sign_key: Path | None,
    force: bool,
    progress: Callable[[str, int, int], None],
    target: PublishTarget | None = None,
    now: Callable[[], float] = time.time,
) -> Published:
    """Validate, pack, sign and upload ``source`` to ``registry``; see the module."""
    key = load_secret_key(sign_key) if sign_key is not None else None
    prepared = prepare(source)
    meta = prepared.workflow.metadata
    name, version = meta.name, meta.version
    target = target if target is not None else target_for(registry)
    existing = target.published(name=name, version=version) or {}
    files = dict(prepared.files)
    same = bool(existing) and all(existing.get(f) == data for f, data in files.items())
    if key is not None:
        signature = existing.get(SIGNATURE_FILE)
        if same and signature is not None and _signed_by(prepared.spec, signature, key):
            files[SIGNATURE_FILE] = signature  # already signed by this key: keep it
        else:
            comment = f"timestamp:{int(now())}\tfile:{SPEC_FILE}\thashed"
            files[SIGNATURE_FILE] = sign(prepared.spec, key=key, trusted_comment=comment)
    changed = [f for f, data in files.items() if existing.get(f) != data]
    if existing and not same and not force:
        differing = ", ".join(sorted(f for f in prepared.files if existing.get(f) != files[f]))
        raise PublishRefused(
            f"{name}@{version} is already published in {registry} with other bytes "
            f"({differing}); publish a new version, or pass --force to replace it"
        )
    resigned = same and SIGNATURE_FILE in changed and SIGNATURE_FILE in existing
    if resigned and not force:
        raise PublishRefused(
            f"{name}@{version} in {registry} is signed by another key; runs that verify "
            "against it would fail after re-signing (pass --force to re-sign)"
        )
    if not existing or not same:
        # A new or replaced version: drop a stale signature only by overwriting; an
        # unsigned republish of a signed version would leave a signature of other bytes.
        if key is None and SIGNATURE_FILE in existing:
            raise PublishRefused(
                f"{name}@{version} in {registry} has a signature ({SIGNATURE_FILE}) that "
                "would no longer match: pass --sign-key"
            )
        upload = files
    else:
        upload = {f: files[f] for f in changed}
    if upload:
        target.upload(name=name, version=version, files=upload, progress=progress)
    code = prepared.workflow.spec.runtime.code
    return Published(
        ref=f"{name}@{version}",
        registry=registry,
        integrity_hash=spec_digest(prepared.spec),
        code_digest=code.digest if code is not None else None,
        signed_by=key_id_hex(key.key_id) if key is not None else None,
        uploaded=tuple(sorted(upload)),
    )


def _signed_by(spec: bytes, signature: bytes, key: SecretKey) -> bool:
    try:
        verify_signature(spec, signature_file=signature, keys=[key.public()])
    except PlntError:
        return False
    return True


# --- the commands -------------------------------------------------------------------------


def add_parsers(sub: Any) -> None:
    """``plnt keygen`` and ``plnt publish`` on the CLI's subcommands."""
    keygen_parser = sub.add_parser(
        "keygen", help="write a minisign key pair for signing published specs"
    )
    keygen_parser.add_argument(
        "--out", required=True, type=Path, metavar="PREFIX", help="writes PREFIX.key and PREFIX.pub"
    )
    publish_parser = sub.add_parser(
        "publish", help="validate, sign and upload a workflow spec (and its code) to a registry"
    )
    publish_parser.add_argument(
        "source", type=Path, metavar="FILE|DIR", help="workflow.yaml, or the folder holding it"
    )
    publish_parser.add_argument(
        "--registry",
        required=True,
        help="file:///abs/path, s3://bucket[/prefix] or oci://host[:port]/path",
    )
    publish_parser.add_argument(
        "--sign-key", type=Path, metavar="KEY", help="minisign secret key (from plnt keygen)"
    )
    publish_parser.add_argument(
        "--force", action="store_true", help="replace a published version that has other bytes"
    )


def run(args: Any, *, say: Callable[[str], None], tell: Callable[[str], None]) -> int:
    """Run ``keygen`` or ``publish``: results on ``say`` (stdout), progress on ``tell``."""
    if args.command == "keygen":
        secret, public, encoded = keygen(args.out)
        say(f"secret key: {secret} (unencrypted, mode 0600: keep it secret)")
        say(f"public key: {public}")
        say(f"verify.publicKeys entry: {encoded}")
        return 0

    def progress(file: str, sent: int, total: int) -> None:
        if sent == total:
            tell(f"uploaded {file} ({total} bytes)")
        elif sent == 0:
            tell(f"uploading {file} ({total} bytes) ...")

    result = publish(
        args.source,
        registry=args.registry,
        sign_key=args.sign_key,
        force=args.force,
        progress=progress,
    )
    if not result.uploaded:
        tell(f"{result.ref} is already published with these bytes: nothing to upload")
    say(f"ref: {result.ref}")
    say(f"registry: {result.registry}")
    say(f"integrityHash: {result.integrity_hash}")
    if result.code_digest is not None:
        say(f"code digest: {result.code_digest}")
    if result.signed_by is not None:
        say(f"signed by key: {result.signed_by}")
    return 0
