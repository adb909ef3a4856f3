"""``python -m plnt_local_backend``: the same as ``plnt serve local-backend``."""

from plnt_local_backend.app import main

main()
