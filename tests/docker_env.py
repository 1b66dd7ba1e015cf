"""A real Docker engine for the tests, started by the tests themselves.

``dockerd`` from Debian's docker.io, with its own data and exec roots under the session's temp
folder, the vfs storage driver and no iptables (what works on these machines, see DESIGN.md),
listening on a socket of its own: the user's Docker, if any, is left alone. No registry is
reachable, so the test image is imported from a tar of one static Go binary
(tests/fixtures/tinyhttp).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from drills.common.docker import DockerClient, DockerError
from stack.provision import _find_go
from tests.conftest import free_port

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tinyhttp"
IMAGE = "drills-test/tinyhttp:1"
NETWORK = "drills-test-net"


@dataclass
class DockerEnv:
    host: str
    client: DockerClient
    env: dict[str, str]
    tls_host: str = ""
    """The same daemon on loopback TCP, TLS with client certificates (``--tlsverify``)."""
    cert_path: Path = Path()
    """``ca.pem``, ``cert.pem`` and ``key.pem`` of a client it trusts (``DOCKER_CERT_PATH``)."""

    def docker(self, *args: str) -> str:
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, env=self.env, timeout=120
        )
        assert result.returncode == 0, f"docker {' '.join(args)}: {result.stderr}"
        return result.stdout.strip()


def _build_image(env: DockerEnv, work: Path) -> None:
    go = _find_go()
    assert go, "Go is needed to build the test image"
    binary = work / "root" / "server"
    binary.parent.mkdir(parents=True)
    subprocess.run(
        [go, "build", "-trimpath", "-o", str(binary), "."],
        cwd=FIXTURE,
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        check=True,
        capture_output=True,
    )
    tar = work / "rootfs.tar"
    with tarfile.open(tar, "w") as out:
        out.add(binary, arcname="server")
    env.docker("import", "--change", 'ENTRYPOINT ["/server"]', str(tar), IMAGE)


def _certificates(out: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl:
    the daemon's files are ``server-*.pem``, a client's ``ca.pem``, ``cert.pem``, ``key.pem``
    (what ``DOCKER_CERT_PATH`` holds)."""
    out.mkdir(parents=True)

    def ssl(command: str) -> None:
        subprocess.run(["openssl", *command.split()], cwd=out, check=True, capture_output=True)

    new_key = "-newkey rsa:2048 -nodes"
    ssl(f"req -x509 {new_key} -days 2 -subj /CN=test-ca -keyout ca-key.pem -out ca.pem")
    (out / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (out / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for key, cert, cn, ext in (
        ("server-key.pem", "server-cert.pem", "127.0.0.1", "server.ext"),
        ("key.pem", "cert.pem", "drills-test", "client.ext"),
    ):
        ssl(f"req {new_key} -subj /CN={cn} -keyout {key} -out request.csr")
        ssl(
            f"x509 -req -in request.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 "
            f"-out {cert} -extfile {ext}"
        )
    return out


@pytest.fixture(scope="session")
def docker_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEnv]:
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not Path(dockerd).exists() or os.geteuid() != 0:
        pytest.fail(
            "these tests start a real Docker engine: they need dockerd (Debian's docker.io, "
            "which stack/bootstrap.sh installs when run as root) and root"
        )
    root = tmp_path_factory.mktemp("docker")
    sock = root / "docker.sock"
    tls = _certificates(root / "tls")
    tls_port = free_port()
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            dockerd,
            "--storage-driver",
            "vfs",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--host",
            f"unix://{sock}",
            # The same daemon on TCP, TLS both ways (what a remote daemon looks like).
            "--host",
            f"tcp://127.0.0.1:{tls_port}",
            "--tlsverify",
            "--tlscacert",
            str(tls / "ca.pem"),
            "--tlscert",
            str(tls / "server-cert.pem"),
            "--tlskey",
            str(tls / "server-key.pem"),
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "docker.pid"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    host = f"unix://{sock}"
    env: DockerEnv | None = None
    try:
        deadline = time.monotonic() + 60
        while env is None:
            try:  # the client agrees its API version with the daemon as it is made
                client = DockerClient(host)
            except DockerError:
                assert proc.poll() is None, (root / "dockerd.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "dockerd did not come up"
                time.sleep(0.3)
                continue
            env = DockerEnv(
                host,
                client,
                {**os.environ, "DOCKER_HOST": host},
                f"tcp://127.0.0.1:{tls_port}",
                tls,
            )
        _build_image(env, root)
        env.docker("network", "create", "--driver", "bridge", NETWORK)
        yield env
    finally:
        if env is not None:
            try:
                ids = env.docker("ps", "-aq").split()
                if ids:
                    env.docker("rm", "-f", *ids)
            except AssertionError:
                pass
            env.client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        _unmount_under(root)


def _unmount_under(root: Path) -> None:
    """dockerd leaves its default network namespace mounted under its exec root; unmount
    what it left so that the temp folder can be removed (and no mount outlives the session)."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


@dataclass
class SshDocker:
    host: str
    """``ssh://root@127.0.0.1:PORT``: the test daemon behind a real sshd."""
    bin_dir: Path
    """Put first on PATH: an ``ssh`` that is OpenSSH's with this session's config (key, known
    host), the way a user's ``~/.ssh/config`` would say it, without touching theirs."""


@pytest.fixture(scope="session")
def ssh_docker(
    docker_env: DockerEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SshDocker]:
    """The test daemon reached as ``docker -H ssh://...`` reaches a remote one: OpenSSH's sshd
    on loopback (Debian's openssh-server, which stack/bootstrap.sh installs as root), which runs
    ``docker system dial-stdio`` for the client with ``DOCKER_HOST`` pointing at the daemon."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists() or not shutil.which("ssh"):
        pytest.fail("the ssh:// test needs OpenSSH (Debian's openssh-server and -client) and root")
    work = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name)], check=True
        )
    (work / "authorized_keys").write_text((work / "client_key.pub").read_text())
    port = free_port()
    (work / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {work / 'host_key'}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nPidFile {work / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"SetEnv DOCKER_HOST={docker_env.host}\n"
    )
    host_key = (work / "host_key.pub").read_text().split()
    (work / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (work / "ssh_config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {work / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {work / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
    )
    bin_dir = work / "bin"
    bin_dir.mkdir()
    ssh = shutil.which("ssh")
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec {ssh} -F {work / "ssh_config"} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    log = open(work / "sshd.log", "wb")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(work / "sshd_config")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(
                [str(bin_dir / "ssh"), "-p", str(port), "root@127.0.0.1", "true"],
                capture_output=True,
                timeout=20,
            )
            if probe.returncode == 0:
                break
            assert proc.poll() is None, (work / "sshd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, probe.stderr.decode()[-2000:]
            time.sleep(0.3)
        yield SshDocker(f"ssh://root@127.0.0.1:{port}", bin_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
