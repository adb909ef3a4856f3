"""``python -m plnt_router``: the same as ``plnt serve router``."""

from plnt_router.app import main

main()
