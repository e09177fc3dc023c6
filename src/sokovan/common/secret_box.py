"""Short secrets sealed under the cluster secret: keypairs' secret keys (Backend.AI's request
signatures need the secret itself, so unlike a token it cannot be stored as a hash).

A sealed secret is `v1:<nonce>:<ciphertext>` (URL-safe base64): AES-256-GCM under a key derived
from the cluster secret with HKDF-SHA256 and a fixed info string, a fresh 96-bit nonce each time.
Opening it with another cluster secret, or after any byte of it changed, raises `SecretBoxError`.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import string
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION = "v1"
_INFO = b"sokovan keypair secret key v1"
_NONCE_BYTES = 12
# Backend.AI's secret keys: 40 letters and digits.
SECRET_KEY_LENGTH = 40
_SECRET_ALPHABET = string.ascii_letters + string.digits


class SecretBoxError(ValueError):
    """A sealed secret that cannot be opened: malformed, tampered with, or sealed under another
    cluster secret."""


def new_secret_key() -> str:
    return "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(SECRET_KEY_LENGTH))


@lru_cache(maxsize=4)
def _cipher(cluster_secret: str) -> AESGCM:
    if not cluster_secret:
        raise SecretBoxError("no cluster secret: secrets cannot be sealed or opened")
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(cluster_secret.encode())
    return AESGCM(key)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def seal(secret: str, cluster_secret: str) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _cipher(cluster_secret).encrypt(nonce, secret.encode(), None)
    return f"{VERSION}:{_b64(nonce)}:{_b64(sealed)}"


def open_sealed(sealed: str, cluster_secret: str) -> str:
    version, _, rest = sealed.partition(":")
    nonce_b64, _, data_b64 = rest.partition(":")
    if version != VERSION or not nonce_b64 or not data_b64:
        raise SecretBoxError(f"not a sealed secret of version {VERSION}")
    try:
        nonce = base64.urlsafe_b64decode(nonce_b64.encode())
        data = base64.urlsafe_b64decode(data_b64.encode())
    except (binascii.Error, ValueError) as exc:
        raise SecretBoxError("a sealed secret with malformed base64") from exc
    if len(nonce) != _NONCE_BYTES:
        raise SecretBoxError("a sealed secret with a nonce of the wrong size")
    try:
        return _cipher(cluster_secret).decrypt(nonce, data, None).decode()
    except (InvalidTag, UnicodeDecodeError) as exc:
        raise SecretBoxError(
            "the sealed secret was tampered with or sealed under another cluster secret"
        ) from exc
