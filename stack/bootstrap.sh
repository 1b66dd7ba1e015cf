#!/usr/bin/env bash
# Make (or reuse) the harness environment in .venv, then run a command from it:
#
#   bash stack/bootstrap.sh drills stack up
#   bash stack/bootstrap.sh pytest
#
# Only the harness is installed here (a few small packages). The heavy parts (vLLM for the CPU,
# the model, Toxiproxy) are installed on first use by stack/provision.py into ~/.cache/drills,
# outside the checkout, keyed by version.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The command runs where the caller stands (relative scenario, --safety, ./drills-safety.yaml
# and runs/ paths are theirs); only the set-up below, and the project's own tools, run in the
# repository.
caller=$PWD
cd "$root"
python=${DRILLS_PYTHON:-python3}
stamp=.venv/.drills-installed
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: preparing the harness environment in .venv" >&2
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  # A venv made by another tool (uv venv) may have no pip.
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
  # uv (a dependency anyway: it builds the engine environments) installs the harness in about
  # 2 s where pip takes about 17 s on 2 cores.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv>=0.4"
  .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -e '.[test]'
  echo "$want" > "$stamp"
fi
# Debian packages only the tests use, installed for the test command alone (the main job,
# `drills ...`, needs none of them; a first run should not wait for Chromium).
if [ "${1:-}" = pytest ]; then
  # The HTML report is tested in a real headless Chromium (Debian's package).
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Chromium for the report tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >&2
  fi
  # The docker injector's tests start their own Docker engine (Debian's docker.io: dockerd,
  # containerd, runc); nothing is started here.
  if ! command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Docker (docker.io) for the container fault tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io) >&2
  fi
  # The ssh:// Docker test reaches that engine through a real sshd on loopback (started by the
  # test); the package is installed without starting the system's ssh service (policy-rc.d).
  if ! [ -x /usr/sbin/sshd ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing OpenSSH's server for the ssh:// Docker test (not started)" >&2
    held=""
    if ! [ -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      held=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server) >&2
    if [ -n "$held" ]; then rm -f /usr/sbin/policy-rc.d; fi
  fi
  # The PostgreSQL run-history tests start their own server (Debian's postgresql, run from
  # /usr/lib/postgresql/*/bin); the package is installed without starting its service.
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing PostgreSQL for the run-history tests (not started)" >&2
    held=""
    if ! [ -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      held=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    if [ -n "$held" ]; then rm -f /usr/sbin/policy-rc.d; fi
  fi
  # The load-worker test runs one worker with its wall clock set ahead by libfaketime (Debian's
  # faketime), to prove the master moves its records onto its own clock.
  if ! command -v faketime >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing faketime for the load-worker clock test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime) >&2
  fi
fi
# Go builds Toxiproxy on first use; it lives here on these machines even when not on PATH.
[ -d /usr/local/go/bin ] && export PATH="$PATH:/usr/local/go/bin"
[ $# -gt 0 ] || set -- drills --help
case "$1" in
  pytest | ruff | mypy | lint-imports) ;;  # the project's tools: from the repository root
  *) cd "$caller" ;;
esac
exec "$root/.venv/bin/$1" "${@:2}"
