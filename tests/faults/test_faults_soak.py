"""The soak in short: runs changing and going away under SIGKILLs of services and of
nats-server; `python -m bench.soak --runs 200` is the long version."""

from pathlib import Path

from bench.soak import KILLED_KINDS, Soak


async def test_a_short_soak_loses_nothing_and_leaves_nothing_behind(tmp_path: Path) -> None:
    soak = Soak(runs=12, seed=5, data_dir=tmp_path, chaos_every_s=1.0)
    report = await soak.run()
    print(report.table())
    assert report.sagas >= 12
    # every kind of process died at least once: each saga service, the local backend, NATS
    assert set(report.killed) == set(KILLED_KINDS), report.killed
    assert report.nats_restarts > 0, "the chaos loop never restarted nats-server"
    assert report.write_errors == []
    assert report.lost == 0
    assert report.double_terminals == 0
    assert report.wrong_final_state == []  # healthy versions Ready on their revision
    assert report.orphans == []
    assert report.replay_matches
