"""Connecting to Ray and handing object storage to Ray Data."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["get", "init_ray"]


def init_ray(**kwargs) -> None:
    """Join the cluster in ``RAY_ADDRESS`` (as under ``ray job submit``) or start a local one.

    Idempotent. Locally the dashboard and usage stats stay off, and worker logs stay out of the
    driver's output unless ``SWE_RAY_LOGS=1``.
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**kwargs)
        return
    # Workers must see the same object-storage endpoint and credentials as the driver.
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("AWS_", "SWE_")) or k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    kwargs.setdefault("address", "local")  # never a stray `ray start` cluster on this machine
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", os.environ.get("SWE_RAY_LOGS") == "1")
    kwargs.setdefault("runtime_env", {"env_vars": env})
    ray.init(**kwargs)


def get(refs: Any) -> Any:
    """``ray.get`` that re-raises a task's own exception (e.g. ``ValueError``) as itself, so
    users see the clear message the task raised rather than a wrapped ``RayTaskError``."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        raise e.as_instanceof_cause() from None
