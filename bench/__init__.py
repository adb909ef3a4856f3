"""Benchmarks of plnt: ``python -m bench`` (``task bench``) prints markdown tables.

Sections: the deploy plane, the router against nginx, the runner (see ``__main__``).
"""
