"""The environment a runner process starts with: ``PLNT_RUNNER_*`` for one release.

The runner inherits the local-backend's environment (PATH, PLNT_LOG_FORMAT, and any
PLNT_RUNNER_* tuning such as PLNT_RUNNER_MAX_IN_FLIGHT set for `plnt up`), then every
variable the local-backend owns is set explicitly, so nothing inherited overrides it.

This is the one module of the service that reads ``os.environ`` outside settings, on
purpose: a desired release names the *variable* holding its LLM API key
(``llm.api_key_env``), never the key, so the key travels from the local-backend's own
environment to the runner's without ever being written to NATS or disk.
"""

import os
from collections.abc import Mapping
from pathlib import Path

from plnt_common.releases import DesiredRelease
from plnt_local_backend.errors import RunnerConfigInvalid


def runner_env(
    *,
    desired: DesiredRelease,
    workflow_file: Path,
    host: str,
    port: int,
    owner_pid: int | None,
    base_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The runner's environment; ``base_env`` defaults to this process's environment.

    Raises ``RunnerConfigInvalid`` when ``llm.api_key_env`` names a variable that is not set.
    """
    base = dict(os.environ if base_env is None else base_env)
    api_key = ""
    key_var = desired.llm.api_key_env
    if key_var:
        if key_var not in base:
            raise RunnerConfigInvalid(
                f"environment variable {key_var} (llm.api_key_env of release "
                f"{desired.namespace}/{desired.release}) is not set for the local-backend"
            )
        api_key = base[key_var]
    base.update(
        {
            "PLNT_RUNNER_WORKFLOW_FILE": str(workflow_file),
            "PLNT_RUNNER_HOST": host,
            "PLNT_RUNNER_PORT": str(port),
            "PLNT_RUNNER_REVISION": desired.revision,
            "PLNT_RUNNER_LLM_BASE_URL": desired.llm.base_url,
            "PLNT_RUNNER_LLM_API_KEY": api_key,
            "PLNT_RUNNER_LLM_INPUT_PRICE_PER_MTOK_USD": repr(desired.llm.input_price_per_mtok_usd),
            "PLNT_RUNNER_LLM_OUTPUT_PRICE_PER_MTOK_USD": repr(
                desired.llm.output_price_per_mtok_usd
            ),
            "PLNT_RUNNER_LLM_STRUCTURED_OUTPUTS": str(desired.llm.structured_outputs).lower(),
        }
    )
    # Unset rather than empty when there is no owner: an empty string is not a pid.
    _set_or_drop(base, "PLNT_RUNNER_EXIT_WITH_PID", str(owner_pid) if owner_pid else "")
    # No model: the runner's own default applies rather than an inherited one.
    _set_or_drop(base, "PLNT_RUNNER_LLM_MODEL", desired.llm.model)
    return base


def _set_or_drop(env: dict[str, str], name: str, value: str) -> None:
    if value:
        env[name] = value
    else:
        env.pop(name, None)


def with_code(
    env: Mapping[str, str], *, venv: Path, bin_dir: Path, code_dir: Path
) -> dict[str, str]:
    """``env`` for an entrypoint run in a code environment: its ``bin`` first on PATH (so
    ``python`` and the requirements' scripts are the environment's), ``VIRTUAL_ENV`` set,
    and the archive's root first on the import path (PYTHONPATH)."""
    changed = dict(env)
    changed["VIRTUAL_ENV"] = str(venv)
    changed["PATH"] = os.pathsep.join(p for p in (str(bin_dir), env.get("PATH", "")) if p)
    changed["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(code_dir), env.get("PYTHONPATH", "")) if p
    )
    changed.pop("PYTHONHOME", None)
    return changed
