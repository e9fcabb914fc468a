"""TLS for the clusters raygrid starts and joins (:mod:`raygrid.pipeline.credentials`): only
holders of a cluster's key reach its scheduler; a TLS scheduler of the user's is joined with
the cluster file's credentials, or refused saying which are missing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from raygrid.pipeline.cluster import connect
from raygrid.pipeline.clusterfile import (
    LocalConfig,
    LocalCUDAConfig,
    SchedulerConfig,
    read_cluster,
)
from raygrid.pipeline.credentials import files_security, main, write_credentials
from raygrid.pipeline.errors import InputError


def _refused(address: str, security=None) -> bool:
    """Whether the scheduler at ``address`` refuses to answer a peer presenting
    ``security`` (none: no credentials) within 3 s. (With Dask's ``Client``, a refused
    attempt left the next one's event loop unable to start.)"""
    import asyncio

    from distributed.comm import connect

    args = security.get_connection_args("client") if security is not None else {}

    async def attempt() -> None:
        comm = await connect(address, timeout=3, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            await asyncio.wait_for(comm.read(), 3)
        finally:
            comm.abort()

    try:
        asyncio.run(attempt())
    except (OSError, TimeoutError, TypeError):
        return True
    return False


def test_a_local_cluster_admits_only_holders_of_its_key():
    # Any user of the machine could connect to its loopback port and run code as you.
    from distributed.security import Security

    config = LocalConfig(cluster="local", n_workers=1, dashboard_address=":0")
    with connect(config, echo=lambda line: None) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(lambda: 1).result() == 1
        assert not _refused(address, client.security)  # its own key: answered
        assert _refused(address)  # no credentials
        assert _refused(address.replace("tls://", "tcp://"))  # plain TCP
        assert _refused(address, Security.temporary())  # another key
    plain = config.model_copy(update={"tls": False})
    with connect(plain, echo=lambda line: None) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")


def test_threads_in_this_process_without_a_host_have_no_port_to_guard():
    config = LocalConfig(cluster="local", n_workers=1, processes=False, host=None,
                         dashboard_address=":0")  # fmt: skip
    with connect(config, echo=lambda line: None) as client:
        assert client.scheduler.address.startswith("inproc://")


def test_written_credentials_are_the_users_alone(tmp_path):
    folder = tmp_path / "tls"
    cert, key = write_credentials(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "BEGIN CERTIFICATE" in cert.read_text() and "PRIVATE KEY" in key.read_text()
    old = key.read_text()
    key.chmod(0o644)  # a pair left from an earlier start: replaced, not reused
    assert main([str(folder)]) == 0
    assert key.read_text() != old and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert main([]) == 2


def _scheduler_with(folder: Path):
    """A TLS scheduler (in this process) with the credentials written into ``folder``."""
    from distributed import LocalCluster

    cert, key = write_credentials(folder)
    return LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1",
        protocol="tls://", dashboard_address=":0", security=files_security(cert, cert, key),
    )  # fmt: skip


def test_a_tls_scheduler_is_joined_with_the_cluster_files_credentials(tmp_path, caplog):
    with _scheduler_with(tmp_path / "tls") as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        (tmp_path / "scheduler.json").write_text(json.dumps({"address": address}))
        cert, key = str(tmp_path / "tls" / "cert.pem"), str(tmp_path / "tls" / "key.pem")
        tls = {"ca_file": cert, "cert": cert, "key": key}
        for where in ({"address": address}, {"scheduler_file": tmp_path / "scheduler.json"}):
            config = SchedulerConfig(cluster="scheduler", tls=tls, **where)
            with caplog.at_level("WARNING", logger="distributed.comm"):
                with connect(config, echo=lambda line: None) as client:
                    assert client.submit(sum, [1, 2]).result() == 3
            # The address's probe says hello with the credentials: its bare connection
            # left "TLS handshake failed" in the scheduler's log at every run.
            assert "TLS handshake failed" not in caplog.text
            # Without them, Dask's client failed with a TypeError about an ssl_context.
            bare = SchedulerConfig(cluster="scheduler", timeout=2, **where)
            with pytest.raises(
                InputError, match=r"speaks TLS, and no credentials are given: add tls:"
            ):
                with connect(bare, echo=lambda line: None):
                    pass


def test_credentials_for_a_scheduler_without_tls_are_refused(tmp_path):
    from distributed import LocalCluster

    cert, key = write_credentials(tmp_path / "tls")
    tls = {"ca_file": str(cert), "cert": str(cert), "key": str(key)}
    with pytest.raises(ValueError, match="is not a TLS scheduler's"):
        SchedulerConfig(cluster="scheduler", address="tcp://127.0.0.1:8786", tls=tls)
    with LocalCluster(
        n_workers=1, processes=False, host="127.0.0.1", protocol="tcp://", dashboard_address=":0"
    ) as cluster:
        (tmp_path / "scheduler.json").write_text(json.dumps({"address": cluster.scheduler_address}))
        config = SchedulerConfig(cluster="scheduler", scheduler_file=tmp_path / "scheduler.json",
                                 tls=tls, timeout=2)  # fmt: skip
        with pytest.raises(InputError, match="does not speak TLS: remove the tls: section"):
            with connect(config, echo=lambda line: None):
                pass


def test_missing_credential_files_are_said_at_their_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_credentials(tmp_path / "tls")
    path = tmp_path / "c.yaml"
    path.write_text(
        "cluster: scheduler\naddress: tls://127.0.0.1:8786\ntls:\n"
        "  ca_file: tls/cert.pem\n  cert: tls/cert.pem\n  key: tls/nokey.pem\n"
    )
    with pytest.raises(InputError, match=r"c.yaml:6: tls.key: tls/nokey.pem: no such file"):
        read_cluster(path)
    path.write_text(path.read_text().replace("nokey", "key"))
    assert read_cluster(path).tls.key == Path("tls/key.pem")


def test_tls_is_every_started_clusters_default(tmp_path):
    for kind in ("local", "local-cuda", "slurm", "pbs"):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(f"cluster: {kind}\n")
        assert read_cluster(path).tls is True
        path.write_text(f"cluster: {kind}\ntls: false\n")
        assert read_cluster(path).tls is False
    assert os.environ.get("DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION") is None


def test_a_local_cuda_cluster_gets_credentials_of_its_own(monkeypatch):
    # dask-cuda's LocalCUDACluster passes security on to LocalCluster (no GPU here: a
    # stand-in with its signature starts a LocalCluster of threads).
    import sys
    import types

    from distributed import LocalCluster

    import raygrid.kernels.cuda as cuda

    given = {}

    def local_cuda_cluster(CUDA_VISIBLE_DEVICES=None, rmm_pool_size=None, **kwargs):
        given.update(kwargs)
        return LocalCluster(n_workers=1, processes=False, **kwargs)

    monkeypatch.setitem(sys.modules, "dask_cuda", types.SimpleNamespace(
        LocalCUDACluster=local_cuda_cluster))  # fmt: skip
    monkeypatch.setattr(cuda, "cuda_usable", lambda: True)
    config = LocalCUDAConfig(cluster="local-cuda", dashboard_address=":0")
    with connect(config, echo=lambda line: None) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert not _refused(client.scheduler.address, client.security)
        assert _refused(client.scheduler.address)
    assert given["security"].require_encryption


def test_dasks_own_tls_configuration_is_used_and_a_partial_one_said(tmp_path):
    import dask

    with _scheduler_with(tmp_path / "tls") as cluster:
        cert, key = str(tmp_path / "tls" / "cert.pem"), str(tmp_path / "tls" / "key.pem")
        config = SchedulerConfig(cluster="scheduler", address=cluster.scheduler_address, timeout=3)
        full = {"distributed.comm.tls.ca-file": cert, "distributed.comm.tls.client.cert": cert,
                "distributed.comm.tls.client.key": key}  # fmt: skip
        with dask.config.set(full):
            with connect(config, echo=lambda line: None) as client:
                assert client.submit(sum, [1, 1]).result() == 2
        # Only the authority's certificate: Dask's client failed with a TypeError traceback.
        with dask.config.set({"distributed.comm.tls.ca-file": cert}):
            with pytest.raises(InputError, match=r"tls.client.cert is not set \(or give them"):
                with connect(config, echo=lambda line: None):
                    pass
        with dask.config.set(full | {"distributed.comm.tls.client.key": cert}):
            with pytest.raises(InputError, match=r"configured TLS credentials .*: cert .* and key"):
                with connect(config, echo=lambda line: None):
                    pass


def test_a_certificate_without_its_key_is_said_when_the_file_is_read(tmp_path):
    # It was "cannot reach the Dask scheduler at tls://...: [SSL] PEM lib (_ssl.c:3926)".
    cert, key = write_credentials(tmp_path / "tls")
    address = "tls://127.0.0.1:8786"
    with pytest.raises(ValueError, match=r"cert .*cert.pem holds no private key.*: give key"):
        SchedulerConfig(cluster="scheduler", address=address,
                        tls={"ca_file": str(cert), "cert": str(cert)})  # fmt: skip
    both = tmp_path / "both.pem"  # a certificate with its key in one file needs no key:
    both.write_text(cert.read_text() + key.read_text())
    config = SchedulerConfig(cluster="scheduler", address=address,
                             tls={"ca_file": str(cert), "cert": str(both)})  # fmt: skip
    assert config.tls.key is None
    with pytest.raises(ValueError, match=r"ca_file .*key.pem is not a PEM certificate"):
        SchedulerConfig(cluster="scheduler", address=address,
                        tls={"ca_file": str(key), "cert": str(both)})  # fmt: skip


def test_no_folder_is_left_when_the_credentials_cannot_be_made(tmp_path, monkeypatch):
    # A node's interpreter without cryptography left an empty tls/ behind.
    import raygrid.pipeline.credentials as credentials

    def without_cryptography():
        raise InputError("needs the cryptography package")

    monkeypatch.setattr(credentials, "temporary_security", without_cryptography)
    assert credentials.main([str(tmp_path / "tls")]) == 1
    assert not (tmp_path / "tls").exists()


def test_a_scheduler_files_tls_takes_credentials_or_nothing(tmp_path):
    # `tls: false` (as in the started kinds' files) was "must be a mapping of keys to
    # values, got False".
    path = tmp_path / "s.yaml"
    path.write_text("cluster: scheduler\naddress: tcp://127.0.0.1:8786\ntls: false\n")
    assert read_cluster(path).tls is None
    path.write_text("cluster: scheduler\naddress: tls://127.0.0.1:8786\ntls: true\n")
    with pytest.raises(InputError, match=r"s.yaml:3: tls: an existing scheduler's tls: takes "
                       r"its credentials"):  # fmt: skip
        read_cluster(path)


def test_a_tls_scheduler_given_as_tcp_is_said_at_once(tmp_path):
    # Its silence read as a dashboard's or a stopped scheduler's, after the whole timeout
    # (120 s by default).
    import time

    with _scheduler_with(tmp_path / "tls") as cluster:
        plain = cluster.scheduler_address.replace("tls://", "tcp://")
        config = SchedulerConfig(cluster="scheduler", address=plain, timeout=30)
        start = time.monotonic()
        with pytest.raises(InputError, match=r"it speaks TLS: give its address as tls://127"):
            with connect(config, echo=lambda line: None):
                pass
        assert time.monotonic() - start < 10
