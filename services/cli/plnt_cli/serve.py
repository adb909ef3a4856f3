"""``plnt serve NAME``: run one service in this process."""

import importlib
from collections.abc import Callable

SERVICES: dict[str, str] = {
    "watcher": "plnt_watcher.app",
    "puller": "plnt_puller.app",
    "installer": "plnt_installer.app",
    "smoke": "plnt_smoke.app",
    "promoter": "plnt_promoter.app",
    "router": "plnt_router.app",
    "runner": "plnt_runner.app",
    "local-backend": "plnt_local_backend.app",
}


def service_main(name: str) -> Callable[[], None]:
    module = importlib.import_module(SERVICES[name])
    main: Callable[[], None] = module.main
    return main
