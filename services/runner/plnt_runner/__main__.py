"""``python -m plnt_runner``: the same as ``plnt serve runner`` and ``plnt_runner.serve()``."""

from plnt_runner import serve

serve()
