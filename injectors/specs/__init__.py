"""The specs of the built-in fault families, one module per family, beside its injector
(``injectors/<family>.py`` applies what ``injectors/specs/<family>.py`` describes).

A spec is the pydantic model of a family's faults (a ``drills.model.fault_spec.FaultSpec``
subclass): its ``kind`` values, fields and units, and the traits the runner, validation, the dry
run and the schema ask of it. They sit apart from the injectors so that the scenario model can
import them without the injectors' clients: ``drills.model.faults`` assembles them into the
``Fault`` union.
"""
