"""``python -m plnt_puller``: the same as ``plnt serve puller``."""

from plnt_puller.app import main

main()
