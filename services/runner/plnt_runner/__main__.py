"""``python -m plnt_runner``: the same as ``plnt serve runner``."""

from plnt_runner.app import main

main()
