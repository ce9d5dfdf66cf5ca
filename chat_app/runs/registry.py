"""The runs this worker process runs (for stop and the supervisor's checkpoints), kept as long as
their log after they end."""
from chat_app.services.runs import WORKER_ID

__all__ = ["WORKER_ID", "local_runs"]

local_runs: dict = {}  # run id (UUID) → engine.RunTask
