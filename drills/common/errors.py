"""The exception tree of drills.

Every error the tool raises on purpose derives from ``DrillsError``::

    DrillsError
    ├── InputError            bad scenario, stack config or command line (exit code 2)
    │   └── ConfigError       a file failed validation; carries file:line, field path and value
    ├── ProvisionError        an install step (engine venv, model, Toxiproxy) failed
    ├── StackError            the stack could not be brought up, reached or stopped
    │   └── StackNotRunning   an operation needs a running stack and there is none
    ├── ToxiproxyError        the Toxiproxy API refused or failed a call
    └── RevertError           a fault could not be removed; always recorded, never swallowed

Input errors are the user's to fix and are reported without a traceback; the others are failures
of a run and name the component that failed.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DrillsError",
    "InputError",
    "ProvisionError",
    "RevertError",
    "StackError",
    "StackNotRunning",
    "ToxiproxyError",
]


class DrillsError(Exception):
    """Root of every error drills raises on purpose."""


class InputError(DrillsError):
    """The user's input (a file or the command line) is not acceptable."""


class ConfigError(InputError):
    """One or more problems found while loading a YAML file.

    ``problems`` holds one line per problem, each already formatted as
    ``FILE:LINE FIELD.PATH: message (got VALUE)``.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ProvisionError(DrillsError):
    """Installing or preparing a component (engine, model, Toxiproxy) failed."""


class StackError(DrillsError):
    """The serving stack could not be started, reached or stopped."""


class StackNotRunning(StackError):
    """An operation needs a running stack and none is running."""


class ToxiproxyError(DrillsError):
    """A call to the Toxiproxy API failed."""


class RevertError(DrillsError):
    """A fault could not be reverted; the run records it and reports it."""
