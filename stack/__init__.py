"""The reference serving stack: real vLLM replicas and a backup model behind Toxiproxy, fronted by
a resilient gateway, run by a supervisor. ``drills stack up|status|down`` drives it."""
