"""The runner's I/O adapters: the only modules that import aiohttp's client or NVML.

Each adapter does what it is told and translates infrastructure errors into
``plnt_runner.errors`` at the boundary; none decides whether or when to act.
"""
