"""Provisioning of ``PLNT_SHADOW``, the stream the router publishes shadow pairs on."""

import dataclasses
from pathlib import Path

import pytest
import structlog.testing
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from plnt_common.bus import connect
from plnt_common.bus.provision import SHADOW_MAX_AGE_S, ensure_jetstream
from plnt_common.settings import BusSettings, Limit
from plnt_common.subjects import SHADOW_STREAM, SHADOW_SUBJECTS, STREAM, shadow_subject
from plnt_testkit.configured_nats import configured_nats

GIB = 2**30


async def test_the_shadow_stream_is_made_with_a_day_s_age_and_its_byte_limit(nc: Client) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    config = (await js.stream_info(SHADOW_STREAM)).config
    assert config.subjects == list(SHADOW_SUBJECTS)
    assert (config.max_age, config.max_bytes) == (SHADOW_MAX_AGE_S, GIB)
    assert config.discard == "old"
    ack = await js.publish(shadow_subject("default", "echo"), b"{}")
    assert ack.stream == SHADOW_STREAM


async def test_an_operator_s_limit_stays_and_the_setting_given_wins(nc: Client) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    config = (await js.stream_info(SHADOW_STREAM)).config
    await js.update_stream(dataclasses.replace(config, max_bytes=5 * GIB))
    await ensure_jetstream(js)  # the default does not shrink what an operator set
    assert (await js.stream_info(SHADOW_STREAM)).config.max_bytes == 5 * GIB
    await ensure_jetstream(js, limits=BusSettings(shadow_max_bytes=Limit(2 * GIB, explicit=True)))
    assert (await js.stream_info(SHADOW_STREAM)).config.max_bytes == 2 * GIB


async def test_a_server_too_small_for_the_byte_limit_still_provisions_the_rest(
    tmp_path: Path,
) -> None:
    """The stream is optional to the saga: a server whose JetStream storage is below the
    byte limit gets everything else, and a warning naming the setting."""
    store = f'jetstream {{ store_dir: "{tmp_path / "js"}", max_file_store: 256KB }}'
    with configured_nats(tmp_path, store) as url:
        nc = await connect(url, name="test")
        js = nc.jetstream()
        try:
            with structlog.testing.capture_logs() as logs:
                await ensure_jetstream(js)
            await js.stream_info(STREAM)  # the saga's stream is there
            with pytest.raises(NotFoundError):
                await js.stream_info(SHADOW_STREAM)
            warned = [e for e in logs if e["event"] == "provision.shadow_stream_unavailable"]
            assert len(warned) == 1 and "PLNT_SHADOW_MAX_BYTES" in warned[0]["hint"]
            small = BusSettings(shadow_max_bytes=Limit(64 * 1024, explicit=True))
            await ensure_jetstream(js, limits=small)
            assert (await js.stream_info(SHADOW_STREAM)).config.max_bytes == 64 * 1024
        finally:
            await nc.close()
