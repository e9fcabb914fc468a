"""TLS credentials for the Dask clusters raygrid starts.

A Dask scheduler without them runs whatever a connecting client sends it: any user of the
machine (a local cluster's loopback port) or of the batch cluster's network (a job's
scheduler) could run code as the user who started it. Dask's TLS gives each cluster a
self-signed certificate and its key (``distributed.security.Security.temporary``): only
holders of the key connect. A local cluster keeps them in memory; a batch job writes them
into its own folder, readable by its user alone (:func:`write_credentials`), for its
scheduler, workers and run.

``python -m raygrid.pipeline.credentials FOLDER`` writes them (a job script's first step).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["CERT", "KEY", "temporary_security", "write_credentials", "files_security", "unusable"]

#: The files :func:`write_credentials` writes: the certificate (its own authority) and key.
CERT, KEY = "cert.pem", "key.pem"


def temporary_security() -> Any:
    """A new self-signed certificate and key for one cluster's scheduler, workers and
    clients, in memory (``Security.temporary``, which needs ``cryptography``)."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError:
        raise InputError(
            "TLS for the cluster (tls: true in the cluster file, the default) needs the "
            "cryptography package: pip install cryptography, or set tls: false (anyone who "
            "can reach the scheduler's port can then run code as you)"
        ) from None


def write_credentials(folder: str | Path) -> tuple[Path, Path]:
    """Write a new certificate and key into ``folder`` (made, readable by its owner only;
    an old pair replaced), as :data:`CERT` and :data:`KEY`; return their paths.

    The key is created with mode 0600 before a byte is written, so it is never readable by
    another user, whatever the umask.
    """
    folder = Path(folder)
    security = temporary_security()  # first: without cryptography, no empty folder is left
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    paths = folder / CERT, folder / KEY
    for path, text in zip(paths, (security.tls_ca_file, security.tls_client_key)):
        path.unlink(missing_ok=True)  # a file another user could have opened is not reused
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
    return paths


def unusable(ca_file: str | Path, cert: str | Path, key: str | Path | None) -> str | None:
    """Why a client could not use these TLS files, as OpenSSL says it ("the certificate
    holds no private key: give key"), or ``None``: Dask's client read them only as it
    connected, and said "cannot reach the Dask scheduler: [SSL] PEM lib"."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        return f"ca_file {ca_file} is not a PEM certificate ({error})"
    try:
        context.load_cert_chain(str(cert), None if key is None else str(key))
    except (OSError, ssl.SSLError) as error:
        if key is None:
            return f"cert {cert} holds no private key, or not one OpenSSL reads: give key ({error})"
        return f"cert {cert} and key {key} are not a certificate and its private key ({error})"
    return None


def files_security(ca_file: str | Path, cert: str | Path, key: str | Path) -> Any:
    """A ``Security`` requiring TLS with the given files, for every role (a client's, a
    scheduler's, a worker's: one certificate serves them all, as Dask's temporary one)."""
    from distributed.security import Security

    ca_file, cert, key = str(ca_file), str(cert), str(key)
    return Security(
        require_encryption=True,
        tls_ca_file=ca_file,
        **{f"tls_{role}_{part}": value for role in ("client", "scheduler", "worker")
           for part, value in (("cert", cert), ("key", key))},
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m raygrid.pipeline.credentials FOLDER``: write a job's credentials."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m raygrid.pipeline.credentials FOLDER", file=sys.stderr)
        return 2
    try:
        write_credentials(argv[0])
    except (InputError, OSError) as error:
        print(f"raygrid: cannot write the cluster's TLS credentials: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
