"""Benchmarks of plnt: ``python -m bench`` (``task bench``) prints markdown tables.

Sections: the deploy plane, the router against nginx, the runner (see ``__main__``).
"""

import sys
from pathlib import Path

# the dev-only test kit (fake LLM, cluster helpers) is not in the wheel: bench finds it here
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "testkit"))
