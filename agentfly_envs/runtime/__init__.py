"""Where envs run: in this process (:class:`LocalEnvPool`) or in Ray actors anywhere on a cluster
(:class:`RayEnvPool`, with the ``ray`` extra). Both hand out Gymnasium envs with ``take(n)``::

    from agentfly_envs.runtime import RayEnvPool

    pool = RayEnvPool("agentfly/Math-Python", {"data_files": "gsm8k.jsonl"}, num_workers=4, worker_cpus=1)
    envs = pool.take(16)  # 16 envs, 4 per actor; reset/step run on the actors
    ...
    pool.close()

Neither module imports Ray until a :class:`RayEnvPool` is built. A run picks its runtime by name from
:data:`ENV_RUNTIMES` (``actor_rollout_ref.rollout.env_runtime``) and builds it from :class:`PoolSettings`.
"""

from agentfly_envs.runtime.base import ENV_RUNTIMES, EnvPool, PoolSettings
from agentfly_envs.runtime.local import LocalEnvPool
from agentfly_envs.runtime.remote import INSTALL_HINT, RayEnvPool, RemoteEnv, RemoteEnvError, ray_available

__all__ = [
    "ENV_RUNTIMES",
    "INSTALL_HINT",
    "EnvPool",
    "LocalEnvPool",
    "PoolSettings",
    "RayEnvPool",
    "RemoteEnv",
    "RemoteEnvError",
    "ray_available",
]
