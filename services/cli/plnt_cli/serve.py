"""``plnt serve NAME``: run one service in this process."""

import importlib
import os
from collections.abc import Callable

from pydantic import ValidationError

from plnt_common.errors import PlntError

SERVICES: dict[str, str] = {
    "watcher": "plnt_watcher.app",
    "puller": "plnt_puller.app",
    "installer": "plnt_installer.app",
    "smoke": "plnt_smoke.app",
    "promoter": "plnt_promoter.app",
    "router": "plnt_router.app",
    "runner": "plnt_runner.app",
    "local-backend": "plnt_local_backend.app",
    "console": "plnt_console.app",
}


BACKEND_SETTING = "PLNT_LOCAL_BACKEND_BACKEND"
"""What ``plnt serve local-backend --backend NAME`` sets: the setting the service reads."""


def service_main(name: str, *, backend: str | None = None) -> Callable[[], None]:
    """The service's entry point; a setting it refuses becomes one ``PlntError`` line.

    ``backend`` (``--backend``) is only for the local-backend: the PlntBackend it serves."""
    if backend is not None:
        if name != "local-backend":
            raise PlntError(f"--backend is for `plnt serve local-backend`, not {name}")
        # The flag wins over the environment; the service reads its settings from there.
        os.environ[BACKEND_SETTING] = backend
    module = importlib.import_module(SERVICES[name])
    main: Callable[[], None] = module.main

    def checked_main() -> None:
        try:
            main()
        except ValidationError as exc:
            if not exc.title.endswith("Settings"):
                raise
            raise PlntError(setting_problem(exc, service=name)) from None

    return checked_main


def setting_problem(exc: ValidationError, *, service: str) -> str:
    """``setting PLNT_<SERVICE>_<FIELD>: <why> (got 'value')`` for the first one refused."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or exc.title
    if not where.startswith("PLNT_"):  # a field read with the service's prefix
        where = f"PLNT_{service.upper().replace('-', '_')}_{where.upper()}"
    got = f" (got {error['input']!r})" if isinstance(error.get("input"), str) else ""
    return f"setting {where}: {error['msg']}{got}"
