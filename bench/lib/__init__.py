"""What the verbs share: the flags, the client, the fleet, alternating rounds, the run directory, the servers, the verdict."""
