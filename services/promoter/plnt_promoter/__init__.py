"""The promoter: owns the router table (``plnt-routes``) and decides promotion.

It routes a canary's share once it is installed, moves all traffic on ``smoke.passed``,
and restores the stable route on a failed, timed-out or superseded canary. It installs
and removes nothing (the installer does).
"""
