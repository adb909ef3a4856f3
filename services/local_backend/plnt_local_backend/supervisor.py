"""One release's supervisor: observe -> decide (``logic``) -> act, like a kubelet's pod worker.

It owns at most one runner process for its release: adopts one left by an earlier
local-backend, starts one (spec from the object store, workflow.yaml, spawn, /healthz),
restarts it with back-off when it exits, replaces it when the launch fingerprint
changes, and tears everything down when the release is no longer desired. It reports
each state as the release's observed record. Cancelling it (the local-backend stopping)
leaves the runner running on purpose: the next local-backend adopts it.

It does not watch NATS (the reconciler feeds ``update``), and it decides nothing itself
that ``logic`` can decide.
"""

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from plnt_common import faults
from plnt_common.errors import (
    BusUnavailable,
    CodeInvalid,
    DependenciesFailed,
    InstallFailed,
    SpecInvalid,
    SpecNotFound,
)
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.releases import DesiredRelease, ObservedRelease, ReleasePhase
from plnt_common.workflow import CodeArchive, parse_workflow
from plnt_local_backend import logic
from plnt_local_backend.adapters.code_envs import CodeEnv, CodeEnvs
from plnt_local_backend.adapters.health import HealthProbe
from plnt_local_backend.adapters.processes import (
    RUNNER_HOST,
    RunnerProcess,
    is_group_leader,
    pick_free_port,
    pid_alive,
    spawn_runner,
)
from plnt_local_backend.adapters.release_dir import ReleaseDir
from plnt_local_backend.adapters.release_store import ReleaseStore
from plnt_local_backend.adapters.runner_env import runner_env, with_code
from plnt_local_backend.errors import RunnerConfigInvalid
from plnt_local_backend.launch import LaunchRecord
from plnt_local_backend.logic import Adoption, Failure, ReleaseKey, Step
from plnt_local_backend.settings import LocalBackendSettings

log = get_logger(__name__)

ADOPT_PROBE_S = 2.0
"""How long a found runner may take to answer /healthz before it counts as unhealthy."""

RECOVER_S = 1.0
"""Pause before the supervisor re-observes after an unexpected error (e.g. NATS away)."""

SPEC_RETRY_S = 2.0
"""Pause before fetching a spec again when NATS did not answer (not a failed start)."""


@dataclass(frozen=True)
class _Launch:
    """How this release's runner starts: plnt's runner, or the workflow's entrypoint in
    its code environment (``venv`` set)."""

    command: list[str]
    cwd: Path
    venv: Path | None = None
    bin_dir: Path | None = None


@dataclass
class _Running:
    """The runner this supervisor holds."""

    process: RunnerProcess
    record: LaunchRecord
    ready: bool
    ready_deadline: float
    """Loop time by which /healthz must have answered."""
    ready_since: float | None = None
    """Loop time of the first healthy answer."""


class Supervisor:
    """Supervises the release ``key``; feed it with ``update`` and run ``run`` in a task."""

    def __init__(
        self,
        *,
        key: ReleaseKey,
        desired: DesiredRelease | None,
        settings: LocalBackendSettings,
        store: ReleaseStore,
        probe: HealthProbe,
        envs: CodeEnvs | None = None,
    ) -> None:
        self.key = key
        self._desired = desired
        self._settings = settings
        self._store = store
        self._probe = probe
        self._envs = envs or CodeEnvs(
            root=settings.state_dir / "envs", pip_timeout_s=settings.pip_timeout_s
        )
        self._dir = ReleaseDir(data_dir=settings.state_dir, key=key)
        self._changed = asyncio.Event()
        self._runner: _Running | None = None
        self._failure: Failure | None = None
        self._restarts = 0
        self._failures_in_a_row = 0
        self._retry_at: float | None = None
        self._reported: ObservedRelease | None = None
        self._last_url = ""
        """Where the last runner listened (also an earlier local-backend's): started again there."""
        self._adopted = False
        self._log = log.bind(namespace=key.namespace, name=key.release)

    @property
    def desired(self) -> DesiredRelease | None:
        return self._desired

    def update(self, desired: DesiredRelease | None) -> None:
        """The release's desired record changed (None: deleted); wakes any wait."""
        self._desired = desired
        self._changed.set()

    async def run(self) -> None:
        """Supervise until the release is torn down; survives errors by re-observing."""
        while True:
            try:
                if not self._adopted:
                    await self._adopt()
                    self._adopted = True
                await self._reconcile()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                # NATS away, a full disk...: the runner (if any) keeps running and is held
                # on to; the next round observes again from scratch.
                self._log.exception("supervisor.error", retry_s=RECOVER_S)
                self._reported = None
                await asyncio.sleep(RECOVER_S)

    # --- observe what an earlier local-backend left ---------------------------------

    async def _adopt(self) -> None:
        """Adopt, kill or forget the runner recorded on disk, before deciding anything else."""
        record = self._dir.read_launch()
        pid = record.pid if record is not None else self._dir.read_pid()
        observed = await self._store.observed(self.key)
        if observed is not None:
            self._restarts = observed.restarts
            self._reported = observed
            self._last_url = observed.url
        if pid is None:
            self._failure = logic.restored_failure(observed=observed, desired=self._desired)
            return
        alive = pid_alive(pid, reap=True)
        found = logic.FoundRunner(
            alive=alive,
            group_leader=alive and is_group_leader(pid),
            healthy=alive
            and record is not None
            and await self._probe.healthy_within(
                record.url, timeout_s=ADOPT_PROBE_S, interval_s=self._settings.probe_interval_s
            ),
        )
        verdict = logic.adoption(desired=self._desired is not None, found=found)
        self._log.info("runner.found", pid=pid, verdict=verdict.value, **vars(found))
        if verdict is Adoption.ADOPT and record is not None:
            now = asyncio.get_running_loop().time()
            self._runner = _Running(
                process=RunnerProcess.adopt(pid),
                record=record,
                ready=True,
                ready_deadline=now,
                ready_since=now,
            )
            return
        if verdict is Adoption.KILL:
            await RunnerProcess.adopt(pid).stop(grace_s=self._settings.stop_grace_s)
        self._dir.clear_launch()

    # --- the loop -------------------------------------------------------------------

    async def _reconcile(self) -> None:
        while True:
            self._changed.clear()
            desired = self._desired
            if self._failure is not None and (
                desired is None or not logic.failure_applies(self._failure, desired)
            ):
                # Revived by a new launch or saga: a fresh start, with a fresh count.
                self._reset_attempts()
                self._restarts = 0
            step = logic.next_step(desired=desired, failure=self._failure, runner=self._view())
            self._log.debug("supervisor.step", step=step.value)
            if step is Step.TEAR_DOWN or desired is None:
                await self._tear_down()
                if self._desired is None:
                    return
            elif step is Step.HOLD_FAILED:
                assert self._failure is not None
                await self._report(
                    desired,
                    ReleasePhase.FAILED,
                    message=self._failure.message,
                    reason=self._failure.reason,
                )
                await self._changed.wait()
            elif step is Step.REPLACE:
                self._log.info("runner.replace", revision=desired.revision)
                await self._stop_runner()
                self._reset_attempts()
                self._restarts = 0
            elif step is Step.START:
                await self._start(desired)
            elif step is Step.AWAIT_READY:
                await self._await_ready(desired)
            else:
                await self._serve(desired)

    def _view(self) -> logic.RunnerView | None:
        if self._runner is None:
            return None
        running = self._runner
        return logic.RunnerView(fingerprint=running.record.fingerprint, ready=running.ready)

    # --- steps ----------------------------------------------------------------------

    async def _start(self, desired: DesiredRelease) -> None:
        loop = asyncio.get_running_loop()
        if self._retry_at is not None:
            if await self._pause(self._retry_at - loop.time()):
                return  # desired changed during the back-off: decide again
            self._retry_at = None
        log_ = self._log.bind(sagaid=desired.saga_id, revision=desired.revision)
        try:
            raw = await self._store.fetch_spec(desired.spec_digest)
            if not logic.spec_matches(digest=desired.spec_digest, raw=raw):
                self._fail(desired, f"spec bytes stored as {desired.spec_digest} do not hash to it")
                return
            launch = await self._launch_for(desired, raw)
        except SpecNotFound as exc:
            self._fail(desired, str(exc))
            return
        except BusUnavailable as exc:
            # Not the runner's fault: retry without counting a failed start.
            self._retry_at = loop.time() + SPEC_RETRY_S
            await self._report(desired, ReleasePhase.STARTING, message=str(exc))
            return
        if launch is None or self._changed.is_set():
            return  # failed, or desired changed while the code was prepared: decide again
        port = pick_free_port(
            preferred=logic.preferred_port(
                last_url=self._last_url, failures_in_a_row=self._failures_in_a_row
            )
        )
        try:
            env = runner_env(
                desired=desired,
                workflow_file=self._dir.workflow_file,
                host=RUNNER_HOST,
                port=port,
                owner_pid=self._settings.owner_pid,
            )
        except RunnerConfigInvalid as exc:
            self._fail(desired, str(exc))
            return
        if launch.venv is not None and launch.bin_dir is not None:
            env = with_code(env, venv=launch.venv, bin_dir=launch.bin_dir, code_dir=launch.cwd)
        self._dir.write_workflow(raw)
        try:
            process = spawn_runner(
                command=launch.command,
                env=env,
                cwd=launch.cwd,
                log_file=self._dir.log_file,
            )
        except InstallFailed as exc:
            await self._failed_attempt(desired, why=str(exc), served_s=None)
            return
        # Recorded before the next await: a cancellation cannot leave an unrecorded runner.
        record = LaunchRecord(
            pid=process.pid,
            port=port,
            url=f"http://{RUNNER_HOST}:{port}",
            fingerprint=logic.launch_fingerprint(desired),
            started_at=time.time(),
        )
        self._dir.write_launch(record)
        self._last_url = record.url
        self._runner = _Running(
            process=process,
            record=record,
            ready=False,
            ready_deadline=loop.time() + self._settings.ready_timeout_s,
        )
        log_.info("runner.started", pid=process.pid, url=record.url, restarts=self._restarts)
        SIDE_EFFECTS.labels("local-backend", "runner_start").inc()
        await faults.pause_point("local-backend", "runner", "after_effect")
        await self._report(desired, ReleasePhase.STARTING)

    async def _launch_for(self, desired: DesiredRelease, raw: bytes) -> _Launch | None:
        """How to start the runner of ``raw``; None once the release failed.

        With ``runtime.code`` the archive is read from the object store and made into its
        environment (once per digest, pip included), and the entrypoint runs there.
        Raises ``BusUnavailable`` when the object store does not answer.
        """
        plain = _Launch(command=list(self._settings.runner_command), cwd=self._dir.path)
        try:
            runtime = parse_workflow(raw).spec.runtime
        except SpecInvalid as exc:
            # The puller validated it; plnt's runner reports what it cannot serve, as before.
            self._log.warning("release.spec_unparsed", error=str(exc))
            return plain
        if runtime.code is None:
            return plain
        try:
            env = await self._code_env(desired, runtime.code)
            command = logic.entrypoint_command(runtime.entrypoint, python=str(env.python))
        except (CodeInvalid, DependenciesFailed) as exc:
            self._fail(desired, str(exc), reason=exc.reason)
            return None
        except ValueError as exc:
            self._fail(desired, f"runtime.entrypoint {runtime.entrypoint!r}: {exc}")
            return None
        return _Launch(command=command, cwd=env.code_dir, venv=env.path, bin_dir=env.bin_dir)

    async def _code_env(self, desired: DesiredRelease, code: CodeArchive) -> CodeEnv:
        """The code's environment, made if it is not; raises ``CodeInvalid``,
        ``DependenciesFailed`` or ``BusUnavailable``."""
        env = self._envs.env_for(digest=code.digest, requirements=code.requirements)
        if self._envs.is_made(env):
            return env
        try:
            archive = await self._store.fetch_spec(code.digest)
        except SpecNotFound:
            raise CodeInvalid(
                f"code archive {code.digest} is not in the object store; pull the spec again"
            ) from None
        if code.requirements:
            count = logic.requirements_count(len(code.requirements))
            say = f"installing requirements for {code.digest} ({count})"
            await self._report(desired, ReleasePhase.STARTING, message=say)
        stop = threading.Event()
        try:
            return await asyncio.to_thread(
                self._envs.prepare,
                env,
                digest=code.digest,
                archive=archive,
                requirements=code.requirements,
                stop=stop,
            )
        except asyncio.CancelledError:
            # The thread goes on: tell it to kill pip, so stopping never waits for an install.
            stop.set()
            raise

    async def _await_ready(self, desired: DesiredRelease) -> None:
        runner = self._runner
        assert runner is not None
        loop = asyncio.get_running_loop()
        while True:
            if not runner.process.running():
                await self._runner_exited(desired)
                return
            if await self._probe.healthy(runner.record.url):
                runner.ready = True
                runner.ready_since = loop.time()
                self._log.info("runner.ready", pid=runner.process.pid, url=runner.record.url)
                return
            if loop.time() >= runner.ready_deadline:
                await self._stop_runner()
                why = (
                    f"runner did not answer {runner.record.url}/healthz within "
                    f"{self._settings.ready_timeout_s:g}s"
                )
                await self._failed_attempt(desired, why=why, served_s=None)
                return
            if await self._pause(self._settings.probe_interval_s):
                return

    async def _serve(self, desired: DesiredRelease) -> None:
        runner = self._runner
        assert runner is not None
        await self._report(desired, ReleasePhase.READY)
        while True:
            if not runner.process.running():
                await self._runner_exited(desired)
                return
            if await self._pause(self._settings.probe_interval_s):
                return

    async def _tear_down(self) -> None:
        await self._stop_runner()
        self._dir.remove()
        # Last: "observed gone" is what uninstall waits for, and means "process gone".
        await self._store.forget(self.key)
        self._reported = None
        self._reset_attempts()
        self._restarts = 0
        self._log.info("release.removed")

    # --- outcomes -------------------------------------------------------------------

    async def _runner_exited(self, desired: DesiredRelease) -> None:
        runner = self._runner
        assert runner is not None
        served_s = None
        if runner.ready_since is not None:
            served_s = asyncio.get_running_loop().time() - runner.ready_since
        self._runner = None
        self._dir.clear_launch()
        why = runner.process.exit_description()
        # The runner's last words usually say why (bad spec, port taken...): surface them in
        # the observed message, which `plnt get` shows, rather than only in runner.log.
        if last_words := self._dir.last_log_lines():
            why = f"{why} (last log lines: {last_words})"
        await self._failed_attempt(desired, why=why, served_s=served_s)

    async def _failed_attempt(
        self, desired: DesiredRelease, *, why: str, served_s: float | None
    ) -> None:
        """Count a failed start or an exit; schedule a restart or give up."""
        settings = self._settings
        self._failures_in_a_row = logic.failures_in_a_row(
            previous=self._failures_in_a_row,
            served_s=served_s,
            reset_after_s=settings.restart_reset_after_s,
        )
        if not logic.should_restart(
            failures_in_a_row=self._failures_in_a_row, max_restarts=settings.max_restarts
        ):
            self._fail(
                desired,
                f"gave up after {self._failures_in_a_row} failed starts in a row: {why} "
                f"(log: {self._dir.log_file})",
            )
            return
        delay = logic.restart_delay(
            failures_in_a_row=self._failures_in_a_row,
            initial_s=settings.restart_backoff_initial_s,
            max_s=settings.restart_backoff_max_s,
        )
        self._restarts += 1
        self._retry_at = asyncio.get_running_loop().time() + delay
        message = f"{why}; restart {self._restarts} in {delay:.1f}s (log: {self._dir.log_file})"
        self._log.warning("runner.restarting", reason=why, restarts=self._restarts, delay_s=delay)
        await self._report(desired, ReleasePhase.STARTING, message=message)

    def _fail(self, desired: DesiredRelease, message: str, *, reason: str = "") -> None:
        """Give up on this launch until the desired record names another one.

        The HOLD_FAILED step reports it; nothing is written here.
        """
        self._log.error("release.failed", sagaid=desired.saga_id, message=message, reason=reason)
        self._failure = Failure(
            fingerprint=logic.launch_fingerprint(desired),
            saga_id=desired.saga_id,
            message=message,
            reason=reason,
        )
        self._retry_at = None

    def _reset_attempts(self) -> None:
        self._failure = None
        self._failures_in_a_row = 0
        self._retry_at = None

    # --- helpers --------------------------------------------------------------------

    async def _stop_runner(self) -> None:
        if self._runner is not None:
            self._log.info("runner.stopping", pid=self._runner.process.pid)
            await self._runner.process.stop(grace_s=self._settings.stop_grace_s)
            self._runner = None
        self._dir.clear_launch()

    async def _report(
        self, desired: DesiredRelease, phase: ReleasePhase, *, message: str = "", reason: str = ""
    ) -> None:
        """Write the observed record, unless it is what was written last."""
        runner = self._runner
        record = logic.observed(
            key=self.key,
            desired=desired,
            phase=phase,
            url=runner.record.url if runner else "",
            pid=runner.process.pid if runner else 0,
            restarts=self._restarts,
            message=message,
            reason=reason,
        )
        if record == self._reported:
            return
        await self._store.report(record)
        self._reported = record

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as the desired record changes."""
        if seconds <= 0:
            return self._changed.is_set()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True
