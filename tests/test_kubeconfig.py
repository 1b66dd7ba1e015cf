"""Reading kubeconfigs as kubectl does, on the official client's loader: merged ``KUBECONFIG``,
exec credential plugins, token files; and the one-line errors for a kubeconfig that is missing,
a context it lacks, a plugin that fails or is not there. No cluster is needed to read them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drills.common.errors import InputError
from drills.common.kube import load_kubeconfig


def kubeconfig(path: Path, name: str, user: dict, server: str = "https://127.0.0.1:6443") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": f"{name}-cluster", "cluster": {"server": server}},
                ],
                "users": [{"name": f"{name}-user", "user": user}],
                "contexts": [
                    {
                        "name": name,
                        "context": {"cluster": f"{name}-cluster", "user": f"{name}-user"},
                    }
                ],
                "current-context": name,
            }
        )
    )
    return path


def plugin(folder: Path, body: str) -> Path:
    script = folder / "get-token"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def exec_user(command: Path | str) -> dict:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(command),
            "interactiveMode": "Never",
        }
    }


def test_merged_kubeconfig_finds_a_context_of_either_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = kubeconfig(tmp_path / "a", "staging", {"token": "a-token"}, "https://10.0.0.1:6443")
    b = kubeconfig(tmp_path / "b", "prod", {"token": "b-token"}, "https://10.0.0.2:6443")
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'absent'}:{b}")
    staging = load_kubeconfig(context="staging")
    assert (staging.server, staging.user) == ("https://10.0.0.1:6443", "staging-user")
    assert staging.configuration.api_key["BearerToken"] == "Bearer a-token"
    prod = load_kubeconfig(context="prod")
    assert prod.server == "https://10.0.0.2:6443" and prod.path == f"{a}:{b}"
    with pytest.raises(InputError, match=r"no context 'dev'; the kubeconfig has: staging, prod"):
        load_kubeconfig(context="dev")


def test_a_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-a-file\n")
    path = kubeconfig(tmp_path / "config", "eks", {"tokenFile": str(tmp_path / "token")})
    config = load_kubeconfig(path)
    assert config.configuration.api_key["BearerToken"].strip() == "Bearer from-a-file"


def test_an_exec_plugin_gives_the_token(tmp_path: Path) -> None:
    script = plugin(
        tmp_path,
        'printf \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        '"status": {"token": "k8s-aws-v1.abc"}}\'\n',
    )
    config = load_kubeconfig(kubeconfig(tmp_path / "config", "eks", exec_user(script)))
    assert config.configuration.api_key["BearerToken"] == "Bearer k8s-aws-v1.abc"


def test_an_exec_plugin_that_fails_is_named_with_its_error(tmp_path: Path) -> None:
    script = plugin(tmp_path, 'echo "error: the SSO session has expired" >&2\nexit 1\n')
    path = kubeconfig(tmp_path / "config", "eks", exec_user(script))
    with pytest.raises(InputError) as caught:
        load_kubeconfig(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: user 'eks-user': the exec credential plugin")
    assert str(script) in message and "the SSO session has expired" in message


def test_an_exec_plugin_not_on_path_is_named(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", "eks", exec_user("aws-iam-authenticator-missing"))
    with pytest.raises(
        InputError,
        match=r"user 'eks-user': the exec credential plugin 'aws-iam-authenticator-missing' failed",
    ):
        load_kubeconfig(path)


def test_a_missing_kubeconfig_and_a_missing_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InputError, match=r"absent: cannot read the kubeconfig: no such file"):
        load_kubeconfig(tmp_path / "absent")
    data = yaml.safe_load(kubeconfig(tmp_path / "c", "x", {"token": "t"}).read_text())
    del data["current-context"]
    (tmp_path / "c").write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"no current-context; name one \(contexts: x\)"):
        load_kubeconfig(tmp_path / "c")
