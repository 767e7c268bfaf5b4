"""The gateway's edge: the listening socket's guard, who may come in (access), how many
streams it takes (admission), the worker processes, the metrics, and the service the
connections share."""
