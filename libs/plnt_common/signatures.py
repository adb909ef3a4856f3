"""Minisign keys and signatures (https://jedisct1.github.io/minisign/): what
``plnt keygen`` writes, what ``plnt publish --sign-key`` signs with, and what the puller
checks against ``spec.workflow.verify.publicKeys``.

The files are minisign's own, so ``minisign -Vm workflow.yaml -P RW...`` verifies a
signature plnt wrote:

- public key: ``untrusted comment: ...`` then base64 of ``"Ed" || key id (8) || Ed25519
  public key (32)``; the second line (``RW...``) is what ``verify.publicKeys`` holds.
- secret key: base64 of ``"Ed" || kdf "\\0\\0" || "B2" || salt (32) || opslimit (8) ||
  memlimit (8) || key id (8) || Ed25519 seed+public key (64) || BLAKE2b-256 checksum
  (32)``. plnt writes it *unencrypted* (minisign's ``-W`` format: kdf ``"\\0\\0"``, salt
  and limits zero); keep the file at mode 0600, or in a CI secret. An encrypted minisign
  key (kdf ``"Sc"``) is refused with a message saying so.
- signature: untrusted comment line, base64 of ``"ED" || key id || Ed25519 signature of
  BLAKE2b-512(file)`` (``"Ed"``, legacy: of the file itself, is verified too), the
  trusted comment line, and base64 of the global signature over ``signature || trusted
  comment``. Both signatures must verify.

Pure: bytes in, bytes out; no files, no clock (the caller passes the timestamp).
"""

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from plnt_common.errors import PlntError, SignatureInvalid

SIGNATURE_SUFFIX = ".minisig"
"""A detached signature is the signed file's name plus this: ``workflow.yaml.minisig``."""

_ED = b"Ed"  # the key algorithm, and the legacy signature algorithm (signs the message)
_ED_HASHED = b"ED"  # the signature algorithm over BLAKE2b-512 of the message
_KDF_NONE = b"\x00\x00"
_KDF_SCRYPT = b"Sc"
_CHECKSUM = b"B2"
_TRUSTED = "trusted comment: "
_UNTRUSTED = "untrusted comment: "
MAX_SIGNATURE_BYTES = 4096
"""Bound of a signature file: a real one is about 300 bytes."""


class KeyInvalid(PlntError):
    """A key (file or ``RW...`` string) that is not a usable minisign Ed25519 key."""

    reason = "KeyInvalid"


@dataclass(frozen=True)
class PublicKey:
    """A minisign public key: its 8-byte id and the Ed25519 key."""

    key_id: bytes
    key: bytes

    def encoded(self) -> str:
        """The ``RW...`` form, as ``verify.publicKeys`` and ``minisign -P`` take it."""
        return base64.b64encode(_ED + self.key_id + self.key).decode()

    def file_text(self) -> str:
        """A ``.pub`` file as minisign writes it."""
        return f"{_UNTRUSTED}minisign public key {key_id_hex(self.key_id)}\n{self.encoded()}\n"


@dataclass(frozen=True)
class SecretKey:
    """A minisign secret key: its id and the Ed25519 seed (32 bytes)."""

    key_id: bytes
    seed: bytes

    def public(self) -> PublicKey:
        raw = (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        return PublicKey(key_id=self.key_id, key=raw)

    def file_text(self) -> str:
        """An unencrypted ``.key`` file in minisign's format (kdf ``"\\0\\0"``)."""
        sk = self.seed + self.public().key
        checksum = hashlib.blake2b(_ED + self.key_id + sk, digest_size=32).digest()
        blob = _ED + _KDF_NONE + _CHECKSUM + bytes(32 + 8 + 8) + self.key_id + sk + checksum
        return (
            f"{_UNTRUSTED}minisign secret key {key_id_hex(self.key_id)} (unencrypted)\n"
            f"{base64.b64encode(blob).decode()}\n"
        )


def key_id_hex(key_id: bytes) -> str:
    """The id as minisign prints it: the little-endian integer in upper-case hex."""
    return f"{int.from_bytes(key_id, 'little'):016X}"


def generate() -> SecretKey:
    """A new key pair with a random id."""
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return SecretKey(key_id=secrets.token_bytes(8), seed=seed)


def _b64(text: str, *, what: str, error: type[PlntError]) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise error(f"{what} is not base64") from None


def _payload_line(text: str, *, what: str, error: type[PlntError]) -> str:
    """The key's base64 line: the text itself, or the line after an untrusted comment."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise error(f"{what} is empty")
    if lines[0].startswith(_UNTRUSTED):
        if len(lines) < 2:
            raise error(f"{what} holds a comment line and no key")
        return lines[1]
    return lines[0]


def parse_public_key(text: str, *, what: str = "public key") -> PublicKey:
    """A public key from its ``RW...`` string or a ``.pub`` file's text; raises
    ``KeyInvalid``."""
    raw = _b64(_payload_line(text, what=what, error=KeyInvalid), what=what, error=KeyInvalid)
    if len(raw) != 42 or raw[:2] != _ED:
        raise KeyInvalid(
            f"{what} is not a minisign Ed25519 public key (expected RW... of 42 bytes)"
        )
    return PublicKey(key_id=raw[2:10], key=raw[10:])


def parse_secret_key(text: str, *, what: str = "secret key") -> SecretKey:
    """A secret key from a minisign ``.key`` file's text; raises ``KeyInvalid``."""
    raw = _b64(_payload_line(text, what=what, error=KeyInvalid), what=what, error=KeyInvalid)
    if len(raw) != 158 or raw[:2] != _ED or raw[4:6] != _CHECKSUM:
        raise KeyInvalid(f"{what} is not a minisign Ed25519 secret key")
    if raw[2:4] == _KDF_SCRYPT:
        raise KeyInvalid(
            f"{what} is password-encrypted; plnt signs with unencrypted keys "
            "(`plnt keygen`, or `minisign -G -W`)"
        )
    if raw[2:4] != _KDF_NONE:
        raise KeyInvalid(f"{what} uses an unknown key derivation")
    key_id, sk, checksum = raw[54:62], raw[62:126], raw[126:158]
    # minisign 0.11 leaves the checksum of an unencrypted key zero: nothing to compare then.
    expected = hashlib.blake2b(_ED + key_id + sk, digest_size=32).digest()
    if checksum != bytes(32) and checksum != expected:
        raise KeyInvalid(f"{what} fails its checksum (a damaged or truncated file)")
    secret = SecretKey(key_id=key_id, seed=sk[:32])
    if secret.public().key != sk[32:]:
        raise KeyInvalid(f"{what} holds a public half that does not match its secret")
    return secret


def sign(data: bytes, *, key: SecretKey, trusted_comment: str) -> bytes:
    """A detached minisign signature of ``data`` (prehashed, ``"ED"``), the file's bytes."""
    if "\n" in trusted_comment or "\r" in trusted_comment:
        raise ValueError("a trusted comment is one line")
    private = Ed25519PrivateKey.from_private_bytes(key.seed)
    signature = private.sign(hashlib.blake2b(data, digest_size=64).digest())
    global_signature = private.sign(signature + trusted_comment.encode())
    return (
        f"{_UNTRUSTED}signature from plnt secret key {key_id_hex(key.key_id)}\n"
        f"{base64.b64encode(_ED_HASHED + key.key_id + signature).decode()}\n"
        f"{_TRUSTED}{trusted_comment}\n"
        f"{base64.b64encode(global_signature).decode()}\n"
    ).encode()


def verify(data: bytes, *, signature_file: bytes, keys: list[PublicKey]) -> PublicKey:
    """The key of ``keys`` whose valid signature of ``data`` ``signature_file`` is; raises
    ``SignatureInvalid`` naming what is wrong (malformed, another key, altered bytes or
    trusted comment)."""
    if len(signature_file) > MAX_SIGNATURE_BYTES:
        raise SignatureInvalid(f"the signature file is over {MAX_SIGNATURE_BYTES} bytes")
    try:
        lines = signature_file.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise SignatureInvalid("the signature file is not minisign text") from None
    if len(lines) < 4 or not lines[0].startswith(_UNTRUSTED) or not lines[2].startswith(_TRUSTED):
        raise SignatureInvalid("the signature file is not in minisign's four-line format")
    blob = _b64(lines[1], what="the signature", error=SignatureInvalid)
    global_signature = _b64(lines[3], what="the global signature", error=SignatureInvalid)
    if len(blob) != 74 or blob[:2] not in (_ED, _ED_HASHED) or len(global_signature) != 64:
        raise SignatureInvalid("the signature file does not hold an Ed25519 minisign signature")
    key_id, signature = blob[2:10], blob[10:]
    key = next((k for k in keys if k.key_id == key_id), None)
    if key is None:
        trusted = ", ".join(key_id_hex(k.key_id) for k in keys)
        raise SignatureInvalid(
            f"signed by key {key_id_hex(key_id)}, which is not one of the trusted keys ({trusted})"
        )
    message = hashlib.blake2b(data, digest_size=64).digest() if blob[:2] == _ED_HASHED else data
    public = Ed25519PublicKey.from_public_bytes(key.key)
    try:
        public.verify(signature, message)
    except InvalidSignature:
        raise SignatureInvalid(
            f"the signature by key {key_id_hex(key_id)} does not match the bytes: "
            "the file was altered after it was signed"
        ) from None
    try:
        public.verify(global_signature, signature + lines[2][len(_TRUSTED) :].encode())
    except InvalidSignature:
        raise SignatureInvalid(
            f"the trusted comment of the signature by key {key_id_hex(key_id)} was altered"
        ) from None
    return key
