"""The typed models of drills: scenarios (``scenario``) and the references they make
(``references``), the check families (``check_families``), the journal of a run (``journal``)
and its request records (``records``). Only the loaders see raw YAML or JSON."""
