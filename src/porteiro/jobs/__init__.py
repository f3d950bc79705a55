"""Which process runs what: the roles of `serve`, `worker` and `relay` processes, the
leases that keep each singleton job running in exactly one of them, and the check that
warns while a role with work runs nowhere."""
