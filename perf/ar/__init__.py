"""The autoregressive family: in Triton against its in-process limit, through the gateway, its per-step kernel."""
