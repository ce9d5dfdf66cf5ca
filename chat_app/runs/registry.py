"""The runs this worker process is running (or ran recently, while their log is retained)."""
import os
import socket
import uuid

# Names this process in Run.worker: unique even when a pid is reused after a restart.
WORKER_ID = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

local_runs: dict = {}  # run id (UUID) → engine.RunTask
