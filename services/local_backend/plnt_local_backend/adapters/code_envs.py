"""Code environments: a workflow's code archive unpacked into a virtualenv with its
requirements, made once per code digest under ``<data_dir>/envs/``.

``<envs>/<name>/`` is a virtualenv (``logic.env_name``: the code's digest and a hash of its
requirements, plnt's pinned packages and the interpreter) whose ``code/`` is the
archive's root. The virtualenv sees the local-backend's own site-packages (plnt, its
dependencies, pip) through a ``.pth`` file, after its own; requirements are installed by
that pip with a constraints file pinning every distribution plnt needs, at the version
installed, so a workflow's requirement can add packages but never replace plnt's.

One build per environment, across processes and threads: a build holds ``fcntl.flock``
on ``<envs>/<name>.lock``, and an environment counts as made only once its
``.plnt-env-ready`` file exists, written last with an atomic rename; a build that died
half-way leaves no such file, and the next one starts over. A virtualenv cannot be moved
after it is made (installed scripts name its path), so it is built in place under the
lock rather than renamed into place. Blocking: call ``prepare`` in a worker thread.

What it does not do: decide anything (``logic``), fetch the archive (the supervisor reads
it from the object store), start the entrypoint, or remove environments nobody uses.
"""

import contextlib
import fcntl
import io
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from plnt_common.code_archive import check_archive
from plnt_common.errors import CodeInvalid, DependenciesFailed
from plnt_common.logs import get_logger
from plnt_local_backend import logic

log = get_logger(__name__)

ENVS_DIR = "envs"
READY_FILE = ".plnt-env-ready"
CODE_DIR = "code"
CONSTRAINTS_FILE = "plnt-constraints.txt"
PIP_LOG = "pip.log"
BASE_PTH = "_plnt_base.pth"
STOP_POLL_S = 0.5
"""How often a running pip is checked for a stop request or its timeout."""
PLATFORM_DISTRIBUTION = "plnt"
"""The distribution whose dependency closure is pinned in every environment."""


class BuildStopped(Exception):
    """The build was told to stop (the local-backend stopping); nothing was made."""


@dataclass(frozen=True)
class CodeEnv:
    """A made environment: where its interpreter, scripts and code are."""

    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    @property
    def code_dir(self) -> Path:
        return self.path / CODE_DIR

    @property
    def ready_file(self) -> Path:
        return self.path / READY_FILE


class CodeEnvs:
    """The environments under ``root``; ``python`` is the interpreter they are made from
    (the local-backend's own, which has plnt)."""

    def __init__(
        self,
        *,
        root: Path,
        python: str = sys.executable,
        pip_timeout_s: float = 900.0,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self._python = python
        self._pip_timeout_s = pip_timeout_s
        self._base_env = base_env
        self._constraints: str | None = None

    def env_for(self, *, digest: str, requirements: Sequence[str]) -> CodeEnv:
        """Where the environment of this code and these requirements lives (made or not)."""
        name = logic.env_name(
            digest=digest,
            requirements=requirements,
            constraints=self.constraints(),
            python=f"{self._python} {sys.version}",
        )
        return CodeEnv(self.root / name)

    def is_made(self, env: CodeEnv) -> bool:
        return env.ready_file.is_file()

    def prepare(
        self,
        env: CodeEnv,
        *,
        digest: str,
        archive: bytes,
        requirements: Sequence[str],
        on_install: Callable[[int], None] = lambda _: None,
        stop: threading.Event | None = None,
    ) -> CodeEnv:
        """Make ``env`` unless it is made; returns it. Blocking.

        ``on_install(n)`` is called before pip installs ``n`` requirements (never when the
        environment was made already). Setting ``stop`` kills a running pip within
        ``STOP_POLL_S`` and raises ``BuildStopped`` (the local-backend stopping). Raises
        ``CodeInvalid`` when ``archive`` is not the code pinned by ``digest`` or cannot be
        unpacked safely, and ``DependenciesFailed`` naming the requirement when pip fails.
        A build that raises removes its half-made environment, so a later start tries
        again.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with _locked(self.root / f"{env.path.name}.lock"):
            if self.is_made(env):
                log.info("code.env_reused", digest=digest, env=str(env.path))
                return env
            shutil.rmtree(env.path, ignore_errors=True)  # a build that died half-way
            try:
                self._make(
                    env,
                    digest=digest,
                    archive=archive,
                    requirements=requirements,
                    on_install=on_install,
                    stop=stop,
                )
            except BaseException:
                shutil.rmtree(env.path, ignore_errors=True)
                raise
            _write_atomic(
                env.ready_file,
                json.dumps({"digest": digest, "requirements": list(requirements)}).encode(),
            )
            log.info("code.env_made", digest=digest, env=str(env.path))
            return env

    def constraints(self) -> str:
        """``name==version`` of plnt and every distribution it depends on, as installed."""
        if self._constraints is None:
            self._constraints = platform_constraints()
        return self._constraints

    # --- the build ------------------------------------------------------------------

    def _make(
        self,
        env: CodeEnv,
        *,
        digest: str,
        archive: bytes,
        requirements: Sequence[str],
        on_install: Callable[[int], None],
        stop: threading.Event | None,
    ) -> None:
        check_archive(archive, digest=digest, name=f"code archive {digest}")
        self._run([self._python, "-m", "venv", "--without-pip", str(env.path)], what="venv")
        _unpack(archive, env.code_dir)
        _link_base_site(env)
        if not requirements:
            return
        constraints_file = env.path / CONSTRAINTS_FILE
        constraints_file.write_text(self.constraints())
        on_install(len(requirements))
        log.info(
            "code.requirements_installing",
            digest=digest,
            requirements=len(requirements),
            say=f"installing requirements for {digest} "
            f"({logic.requirements_count(len(requirements))})",
        )
        args = logic.pip_install_args(
            constraints_file=str(constraints_file), requirements=requirements
        )
        pip_log = env.path / PIP_LOG
        code, output = self._pip([str(env.python), "-m", "pip", *args], log_file=pip_log, stop=stop)
        if code != 0:
            message = logic.pip_failure(output=output, requirements=requirements, exit_code=code)
            log.warning("code.requirements_failed", digest=digest, message=message, say=message)
            raise DependenciesFailed(message)
        log.info(
            "code.requirements_installed",
            digest=digest,
            requirements=len(requirements),
            say=f"requirements for {digest} installed",
        )

    def _pip(
        self, argv: list[str], *, log_file: Path, stop: threading.Event | None
    ) -> tuple[int, str]:
        """pip's exit code and output (also written to ``log_file``)."""
        env = dict(os.environ if self._base_env is None else self._base_env)
        # The environment's own interpreter decides where packages go; an inherited
        # PYTHONPATH or PYTHONHOME would point pip at another one.
        for name in ("PYTHONPATH", "PYTHONHOME", "PIP_TARGET", "PIP_PREFIX", "PIP_USER"):
            env.pop(name, None)
        try:
            process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except OSError as exc:
            raise DependenciesFailed(f"cannot run pip: {exc.strerror or exc}") from None
        deadline = time.monotonic() + self._pip_timeout_s
        while True:
            try:
                # A retried communicate() keeps what it read so far.
                output, _ = process.communicate(timeout=STOP_POLL_S)
                break
            except subprocess.TimeoutExpired:
                stopped = stop is not None and stop.is_set()
                if not stopped and time.monotonic() < deadline:
                    continue
                process.kill()
                process.communicate()
                if stopped:
                    raise BuildStopped("stopped while pip was installing") from None
                raise DependenciesFailed(
                    f"pip did not finish installing within {self._pip_timeout_s:g}s"
                ) from None
        log_file.write_text(output)
        return process.returncode, output

    def _run(self, argv: list[str], *, what: str) -> None:
        try:
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DependenciesFailed(f"cannot make the code's {what}: {exc}") from None
        if result.returncode != 0:
            detail = logic.last_lines(result.stderr or result.stdout)
            raise DependenciesFailed(f"cannot make the code's {what}: {detail}")


def platform_constraints(root: str = PLATFORM_DISTRIBUTION) -> str:
    """``name==version`` lines of ``root`` and its dependencies (with their environment
    markers, without extras), as installed; distributions not installed are skipped."""
    pinned: dict[str, str] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in pinned:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        pinned[name] = dist.version
        for text in dist.requires or ():
            try:
                requirement = Requirement(text)
                if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                    continue
            except (InvalidRequirement, UndefinedEnvironmentName):
                continue
            todo.append(requirement.name)
    return "".join(f"{name}=={version}\n" for name, version in sorted(pinned.items()))


def _unpack(archive: bytes, target: Path) -> None:
    """Unpack a checked archive into ``target``; raises ``CodeInvalid``."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as opened:
            # "data": no links out, no devices, no absolute paths, no set-id bits; the
            # archive was checked for the same already, this is the second lock.
            opened.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise CodeInvalid(f"cannot unpack the code archive: {exc}") from None


def _link_base_site(env: CodeEnv) -> None:
    """Let the environment import what the local-backend's interpreter has (plnt, its
    dependencies, pip), after its own packages: ``site.addsitedir`` also runs the ``.pth``
    files there, so editable installs of plnt are found too."""
    purelib = sysconfig.get_path(
        "purelib",
        scheme="venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix",
        vars={"base": str(env.path), "platbase": str(env.path)},
    )
    dirs = [*site.getsitepackages()]
    user_site = site.getusersitepackages()
    if site.ENABLE_USER_SITE and Path(user_site).is_dir():
        dirs.append(user_site)
    lines = [f"import site; site.addsitedir({path!r})\n" for path in dirs if Path(path).is_dir()]
    Path(purelib).mkdir(parents=True, exist_ok=True)
    (Path(purelib) / BASE_PTH).write_text("".join(lines))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
