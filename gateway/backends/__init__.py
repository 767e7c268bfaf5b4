"""What the gateway asks of Triton: the servers (a fixed list, or found in DNS), a
request's plumbing and failures, and each kind of work (synthesis, thinking,
recognition), with the fleet's load and the resumption of a synthesis whose server
went away."""
