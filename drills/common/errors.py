"""The exception tree of drills.

Every error the tool raises on purpose derives from ``DrillsError``::

    DrillsError               context: a dict of what the error is about (shown by -v)
    ├── InputError            bad scenario, stack config, adapter or command line (exit code 2)
    │   ├── ConfigError       a file failed validation; carries file:line, field path and value
    │   ├── SafetyViolation   the drill would exceed the safety policy; nothing was applied
    │   └── RunConflict       another live drill holds what this one would drill; nothing applied
    ├── ProvisionError        an install step (engine venv, model, Toxiproxy) failed
    ├── StackError            the stack could not be brought up, reached or stopped
    │   └── StackNotRunning   an operation needs a running stack and there is none
    ├── APIError              a component's API refused or failed a call: status_code, method, url
    │   ├── ToxiproxyError
    │   ├── DockerError
    │   ├── KubeError
    │   └── HopError      the harness's L7 hop (``drills.hop``)
    ├── InjectionFailed       a fault did not land (nothing matched, the target refused)
    ├── LoadError             the load could not be delivered as asked (a worker never came)
    ├── RevertError           a fault could not be removed; always recorded, never swallowed
    ├── HistoryError          the run history could not be read or written (a run still ends)
    ├── RunStopped            the run was stopped from outside; its faults are reverted
    │   ├── Interrupted       Ctrl-C or SIGTERM
    │   └── KillSwitch        ``drills abort``
    └── DrillFailed           a drill ran and a check failed (the pytest plugin's failure)

Input errors are the user's to fix and are reported without a traceback; the others are failures
of a run and name the component that failed. ``exit_code`` is what the CLI exits with when the
error reaches it (2 for input, 1 for a failed or stopped run).
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "APIError",
    "ConfigError",
    "DockerError",
    "DrillFailed",
    "DrillsError",
    "HistoryError",
    "HopError",
    "InjectionFailed",
    "InputError",
    "Interrupted",
    "KillSwitch",
    "KubeError",
    "LoadError",
    "ProvisionError",
    "RevertError",
    "RunConflict",
    "RunStopped",
    "SafetyViolation",
    "StackError",
    "StackNotRunning",
    "ToxiproxyError",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_FAULT_LEFT = 3
"""A drill ended with a fault it could not revert: the stack is not as it was."""


class DrillsError(Exception):
    """Root of every error drills raises on purpose.

    ``context`` holds what the error is about, by name (the fault, the component, the file),
    for logs and journals; the message alone must already be enough for a person."""

    exit_code: ClassVar[int] = EXIT_FAILED

    def __init__(self, message: str = "", **context: Any) -> None:
        super().__init__(message)
        self.context: dict[str, Any] = context


class HistoryError(DrillsError):
    """The run history (an SQLite file, a PostgreSQL server) could not be read or written.
    A run never fails for it: its journal says so instead."""


class InputError(DrillsError):
    """The user's input (a file or the command line) is not acceptable."""

    exit_code = EXIT_USAGE


class ConfigError(InputError):
    """One or more problems found while loading a YAML file.

    ``problems`` holds one line per problem, each already formatted as
    ``FILE:LINE FIELD.PATH: message (got VALUE)``.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class SafetyViolation(InputError):
    """A drill would exceed what the safety policy allows; nothing was applied."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            "refused by the safety policy (nothing was applied):\n  " + "\n  ".join(problems)
        )


class RunConflict(InputError):
    """Another live run holds what this one would drill (its stack, or a target it faults);
    nothing was touched. ``context["holders"]``: the run ids that hold it."""


class ProvisionError(DrillsError):
    """Installing or preparing a component (engine, model, Toxiproxy) failed."""


class StackError(DrillsError):
    """The serving stack could not be started, reached or stopped."""


class StackNotRunning(StackError):
    """An operation needs a running stack and none is running."""


class APIError(DrillsError):
    """A component's API refused or failed a call.

    ``status_code`` is the HTTP status it answered with, ``None`` when it could not be reached
    at all (then the message says why)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        method: str | None = None,
        url: str | None = None,
        **context: Any,
    ) -> None:
        super().__init__(message, **context)
        self.status_code = status_code
        self.method = method
        self.url = url

    @property
    def not_found(self) -> bool:
        return self.status_code == 404


class ToxiproxyError(APIError):
    """A call to the Toxiproxy API failed."""


class DockerError(APIError):
    """The Docker daemon refused or failed a call (or could not be reached)."""


class KubeError(APIError):
    """The Kubernetes API refused or failed a call (or could not be reached)."""


class HopError(APIError):
    """The harness's L7 hop refused or failed a control call (or could not be reached)."""


class InjectionFailed(DrillsError):
    """A fault could not be applied: nothing matched its selector, or the target refused."""


class LoadError(DrillsError):
    """The load could not be delivered as the scenario asked: a load worker never connected,
    or the master gave up waiting. The run is aborted before its phases, naming them."""


class RevertError(DrillsError):
    """A fault could not be reverted; the run records it and reports it."""


class RunStopped(DrillsError):
    """The run was stopped from outside before its timeline ended; faults are reverted."""


class Interrupted(RunStopped):
    """Ctrl-C or SIGTERM; the message is the signal's name."""


class KillSwitch(RunStopped):
    """``drills abort`` asked this run to stop (raised in the run's main thread)."""


class DrillFailed(DrillsError):
    """A drill ran and a check failed; the message is the whole story (no traceback is
    shown by the pytest plugin)."""
