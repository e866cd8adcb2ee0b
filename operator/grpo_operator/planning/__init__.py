"""Planning: what a valid GRPORun needs and whether it fits.

The model profiles and instance types it plans with, the memory model, the plan (pods, GPUs, EFA, memory per
GPU) and the validation that reads it. Pure: spec in, plan or problems out.
"""
