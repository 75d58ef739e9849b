"""The seeded fault soak (issue 11): evictions from every source under injected faults on the
emulated cluster, with the whole-set, namespace, retention, finalizer and liveness invariants
checked after every round. ``make soak SEED=n`` runs it; a short run is part of ``make test``
(tests/soak/test_soak.py). docs/security.md, "Fault soak", has the numbers."""
