"""Minisign keys and signatures (plnt_common.signatures) against the format itself: an
independent verifier written here from minisign's documented layout, and the real
``minisign`` binary when it is installed (CI installs it: .ci/run)."""

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from plnt_common.errors import SignatureInvalid
from plnt_common.signatures import (
    KeyInvalid,
    generate,
    parse_public_key,
    parse_secret_key,
    sign,
    verify,
)

MINISIGN = shutil.which("minisign")
needs_minisign = pytest.mark.skipif(MINISIGN is None, reason="the minisign binary is not installed")

DATA = b"apiVersion: microagents.dev/v1\nkind: Workflow\n"


def minisign_verify(data: bytes, signature_file: bytes, public_key: str) -> str:
    """A verifier written from minisign's format, sharing no code with plnt: returns the
    trusted comment, raises AssertionError when anything does not hold."""
    key = base64.b64decode(public_key)
    assert len(key) == 42 and key[:2] == b"Ed", "public key: Ed || key id || 32-byte key"
    lines = signature_file.decode().split("\n")
    assert lines[0].startswith("untrusted comment: ")
    assert lines[2].startswith("trusted comment: ")
    blob = base64.b64decode(lines[1])
    assert len(blob) == 74 and blob[:2] == b"ED", "prehashed signature: ED || id || sig"
    assert blob[2:10] == key[2:10], "the key id names the signing key"
    public = Ed25519PublicKey.from_public_bytes(key[10:])
    try:
        public.verify(blob[10:], hashlib.blake2b(data, digest_size=64).digest())
        trusted = lines[2][len("trusted comment: ") :]
        public.verify(base64.b64decode(lines[3]), blob[10:] + trusted.encode())
    except InvalidSignature:
        raise AssertionError("signature does not verify") from None
    return trusted


def test_a_signature_verifies_under_the_format_and_names_its_trusted_comment() -> None:
    key = generate()
    signature = sign(DATA, key=key, trusted_comment="timestamp:0\tfile:workflow.yaml")
    assert minisign_verify(DATA, signature, key.public().encoded()) == (
        "timestamp:0\tfile:workflow.yaml"
    )
    assert verify(DATA, signature_file=signature, keys=[key.public()]) == key.public()


def test_key_files_round_trip_and_the_public_key_is_the_RW_form() -> None:
    key = generate()
    assert parse_secret_key(key.file_text()) == key
    public = parse_public_key(key.public().file_text())
    assert public == key.public()
    assert public.encoded().startswith("RW") and len(public.encoded()) == 56
    raw = base64.b64decode(key.file_text().splitlines()[1])
    assert (raw[:2], raw[2:4], raw[4:6], len(raw)) == (b"Ed", b"\0\0", b"B2", 158)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda s, d: (s, d + b"x"), id="altered-bytes"),
        pytest.param(
            lambda s, d: (s.replace(b"file:workflow.yaml", b"file:other.yaml"), d),
            id="altered-trusted-comment",
        ),
        pytest.param(lambda s, d: (b"not a signature\n", d), id="garbage"),
        pytest.param(lambda s, d: (s.replace(b"\n", b"", 1), d), id="truncated"),
    ],
)
def test_a_tampered_signature_or_file_is_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    key = generate()
    signature, data = tamper(sign(DATA, key=key, trusted_comment="file:workflow.yaml"), DATA)
    with pytest.raises(SignatureInvalid):
        verify(data, signature_file=signature, keys=[key.public()])


def test_a_signature_by_another_key_names_both_key_ids() -> None:
    signer, trusted = generate(), generate()
    signature = sign(DATA, key=signer, trusted_comment="c")
    with pytest.raises(SignatureInvalid, match="not one of the trusted keys"):
        verify(DATA, signature_file=signature, keys=[trusted.public()])
    assert verify(DATA, signature_file=signature, keys=[trusted.public(), signer.public()])


@pytest.mark.parametrize(
    "text",
    ["", "RWQ", "untrusted comment: x\n", "not base64 !!", base64.b64encode(b"x" * 158).decode()],
)
def test_a_malformed_secret_key_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(KeyInvalid) as raised:
        parse_secret_key(text, what="signing key k.key")
    assert "signing key k.key" in str(raised.value) and "\n" not in str(raised.value)


@needs_minisign
def test_the_minisign_binary_verifies_plnt_signatures_and_refuses_altered_files(
    tmp_path: Path,
) -> None:
    assert MINISIGN is not None
    key = generate()
    (tmp_path / "k.pub").write_text(key.public().file_text())
    spec = tmp_path / "workflow.yaml"
    spec.write_bytes(DATA)
    (tmp_path / "workflow.yaml.minisig").write_bytes(sign(DATA, key=key, trusted_comment="t"))
    checked = subprocess.run(
        [MINISIGN, "-V", "-m", str(spec), "-P", key.public().encoded()],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.returncode == 0, checked
    spec.write_bytes(DATA + b"#")
    altered = subprocess.run(
        [MINISIGN, "-V", "-m", str(spec), "-p", str(tmp_path / "k.pub")],
        capture_output=True,
        timeout=30,
    )
    assert altered.returncode != 0


@needs_minisign
def test_keys_written_by_minisign_and_by_plnt_work_in_the_other(tmp_path: Path) -> None:
    assert MINISIGN is not None
    subprocess.run(
        [MINISIGN, "-G", "-W", "-p", str(tmp_path / "m.pub"), "-s", str(tmp_path / "m.key")],
        check=True,
        capture_output=True,
        timeout=30,
    )
    theirs = parse_secret_key((tmp_path / "m.key").read_text())
    assert theirs.public() == parse_public_key((tmp_path / "m.pub").read_text())

    ours = generate()
    (tmp_path / "p.key").write_text(ours.file_text())
    (tmp_path / "f").write_bytes(DATA)
    subprocess.run(
        [MINISIGN, "-S", "-s", str(tmp_path / "p.key"), "-m", str(tmp_path / "f"), "-t", "tc"],
        check=True,
        capture_output=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    signed = (tmp_path / "f.minisig").read_bytes()
    assert verify(DATA, signature_file=signed, keys=[ours.public()]) == ours.public()
