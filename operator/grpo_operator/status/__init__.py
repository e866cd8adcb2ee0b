"""Status: from what was observed (Ray job, KubeRay, miles's gauges) to the GRPORun's status.

Observation types, the guards (repetition, reward floor, stall) and the lifecycle decision. Pure: no clock
is read here, the caller passes the time.
"""
