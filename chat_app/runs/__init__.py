"""Runs: a chat turn that belongs to the server, not to the request that started it (DESIGN §4a).

- `engine`: the run task, the single owner of a turn's lifecycle (slot, deadline, record,
  checkpoints, storing, its frame log).
- `frames`: the frame log a run keeps in the memory of the worker that runs it.
- `redis_bus`: with REDIS_URL, the copy of that log in a Redis Stream and the control channel
  (stop) in pub/sub, so that any worker can serve any run.
- `follow`: what a client reads — replay after a sequence number, then live, always to `done`.
- `supervisor`: one task per worker: heartbeat and text checkpoints of its runs, and finishing
  as interrupted the runs of workers that died.
- `services`: the run's database writes and reads (sync, called through campus_agent.base.asyncdb).
"""
