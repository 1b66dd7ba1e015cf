"""The engine of a drill run: the runner (``runner``: phases, load, probes, checks, journal),
the fault lifecycle (``faults``), the ledger of applied faults (``ledger``) and the safety
policy with the kill switch (``safety``)."""
