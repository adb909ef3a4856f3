"""Benchmarks of plnt: ``python -m bench`` (``task bench``) prints a markdown table."""
