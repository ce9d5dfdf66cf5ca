"""Runs: a chat turn that belongs to the server, not to the request that started it
(docs/design.md#runs). A run's life is read in six modules:

- `lease`: its stream slot, taken and released by one `async with` (and a follower's lease);
- `admission`: a new turn's checks and first writes (the question, the run's row);
- `state`: the run's states in the database, the only writer of `Run.status`;
- `wait`: a run that waits for a person — pause, answer, expiry, resume, close, for every kind;
- `engine`: the run's task on this worker, and the moves that start, resume, stop or reap one;
- `supervisor`: one task per worker: heartbeats, checkpoints, the reaper's and the resume sweeps.

Around them: `chat_input` (the question as a client sends it), `quota` (tokens per day),
`recording` (the events as rows, and storing them), `bus` with `frames` and `redis_bus` (how a
run's frames and its stop reach whoever follows or stops it, on any worker), `follow` (what a
client reads of a run), `turn_log` (the one INFO line a turn writes when its run ends).
"""
