"""The promoter: owns the router table (``plnt-routes``) and decides promotion.

It routes a canary's share once it is installed; on ``smoke.passed`` it moves all traffic,
or, with ``spec.canary.steps``, walks the steps judging each on live figures first
(``analysis``); it restores the stable route on a failed, timed-out or superseded canary.
It installs and removes nothing (the installer does).
"""
