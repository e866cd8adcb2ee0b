"""Status: from what one reconcile observed (Ray job, KubeRay, miles's gauges) to the GRPORun's next status and
the actions that reconcile takes. Pure: no I/O, and the caller passes the time."""
