"""GRPO reward service: miles's remote_rm contract over math_verify, scored in worker processes.

`python -m reward_service` starts it (see `__main__`); `app.create_app` builds the FastAPI app.
"""
