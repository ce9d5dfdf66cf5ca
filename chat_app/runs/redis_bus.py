"""The Redis primitives of the run bus (REDIS_URL; chat_app.runs.bus.RedisBus uses them): a Stream
per run for its frames, pub/sub for stop signals.

Each primitive does its natural job, as LibreChat's resumable streams do: the worker that runs
a run copies its frames, in order, into the Stream `campus:run:<id>:frames` (entry id `<seq>-0`,
so a follower's cursor is the SSE sequence number; `MAXLEN ~` bounds it; it expires
RUN_LOG_RETAIN_SEC after the run ends), followers on other workers `XREAD BLOCK` from the last
seq they have, and a stop travels to the owning worker over the channel `campus:runs:control`.

One client (one connection pool) per process and event loop: campus_agent.base.redis_clients.
"""
import asyncio
import json

from django.conf import settings
from loguru import logger
from redis.asyncio import Redis
from redis.exceptions import RedisError

CONTROL_CHANNEL = "campus:runs:control"
END_FIELD = "end"
FRAME_FIELD = "f"
# How long a running run's log lives if its worker dies before ending it (then it is rebuilt
# from the database): the turn budget and a margin.
RUNNING_TTL_MARGIN_SEC = 120
REDIS_BLOCK_SEC = 4.0  # each XREAD blocks less than the client's socket timeout (redis-py's default is 5 s)

def _retain_sec() -> int:
    return max(int(settings.RUN_LOG_RETAIN_SEC), 1)  # EXPIRE takes whole seconds


def log_key(run_id) -> str:
    return f"campus:run:{run_id}:frames"


class RedisMirror:
    """Copies one run's frames into its Stream, in order, without making the run wait.

    The run appends to its in-memory log and hands the frame here; one writer task per run
    drains what piled up in a single pipeline of XADDs, at most every RUN_MIRROR_BATCH_SEC, so a
    fast model costs a round trip per batch, not per frame. A Redis failure loses the copy, never the run: followers on this worker
    read the memory log, the others fall back to the stored reply.
    """

    def __init__(self, client: Redis, run_id, *, after_seq: int = 0) -> None:
        self._client = client
        self._key = log_key(run_id)
        # A run resumed after an approval pause on another worker: that worker's last frames may
        # still be on their way to the Stream; ids must grow, so wait for them first (bounded).
        self._after_seq = after_seq
        self._pending: list[tuple[int, bytes, bool]] = []
        self._writer: asyncio.Task | None = None
        self._ttl = int(settings.TURN_BUDGET_SEC) + RUNNING_TTL_MARGIN_SEC
        self._expiry_set = False

    def push(self, seq: int, frame: bytes, *, end: bool = False) -> None:
        self._pending.append((seq, frame, end))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name=f"run-mirror-{self._key}")

    async def _write(self) -> None:
        if self._after_seq:
            await self._wait_for_earlier_frames()
        while self._pending:
            batch, self._pending = self._pending, []
            ended = any(end for _, _, end in batch)
            pipe = self._client.pipeline(transaction=False)
            for seq, frame, end in batch:
                fields = {FRAME_FIELD: frame, END_FIELD: "1"} if end else {FRAME_FIELD: frame}
                pipe.xadd(self._key, fields, id=f"{seq}-0", maxlen=settings.RUN_LOG_MAX_FRAMES, approximate=True)
            if ended or not self._expiry_set:  # a TTL when the log starts (a dead writer's log
                pipe.expire(self._key, _retain_sec() if ended else self._ttl)  # expires), and at its end
                self._expiry_set = True
            try:
                await pipe.execute()
            except RedisError as exc:
                logger.warning("run log copy to Redis failed: {}", exc)
            if not ended:
                # Frames arriving meanwhile go in the next pipeline: at most one round trip per
                # RUN_MIRROR_BATCH_SEC per run, however fast the model streams. Only followers
                # on other workers wait for it; this worker's read the memory log.
                await asyncio.sleep(settings.RUN_MIRROR_BATCH_SEC)

    async def _wait_for_earlier_frames(self, timeout: float = 2.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while await _last_seq_of(self._client, self._key) < self._after_seq:
                if asyncio.get_running_loop().time() >= deadline:
                    logger.warning("resuming {}: the paused frames never reached Redis", self._key)
                    break
                await asyncio.sleep(0.02)
        except RedisError as exc:
            logger.warning("run log copy to Redis failed: {}", exc)
        self._after_seq = 0

    async def hold(self, seconds: float) -> None:
        """Keeps the log (paused for approval, nobody writing) at least `seconds` more."""
        try:
            await self._client.expire(self._key, int(seconds) + RUNNING_TTL_MARGIN_SEC)
        except RedisError as exc:
            logger.warning("run log expiry in Redis not set: {}", exc)
        self._expiry_set = False  # a resumed writer sets the running TTL again

    async def drained(self, timeout: float = 2.0) -> None:
        """Waits (bounded) until every pushed frame was written."""
        writer = self._writer
        if writer is not None and not writer.done():
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(writer)
            except TimeoutError:
                logger.warning("run log copy to Redis still pending after {}s", timeout)


async def _last_seq_of(client: Redis, key: str) -> int:
    entries = await client.xrevrange(key, count=1)
    return int(entries[0][0].split("-")[0]) if entries else 0


async def log_last_seq(client: Redis, run_id) -> int:
    return await _last_seq_of(client, log_key(run_id))


# The worker that ran a run hands frames to its own clients before copying them here, so when it
# dies a client may hold ids the log never got. The closing frame a reaper adds skips this many,
# so that it comes after every id any client can have and its XREAD returns it.
END_ID_GAP = 1000


async def log_append_end(client: Redis, run_id, frames_from_seq) -> None:
    """Ends a log whose writer died: `frames_from_seq(seq)` are the closing frames (the last one
    its end), numbered from `seq`; one entry each, so a follower resumes between them."""
    seq = await log_last_seq(client, run_id) + END_ID_GAP
    frames = frames_from_seq(seq)
    try:
        for offset, frame in enumerate(frames):
            fields = {FRAME_FIELD: frame, END_FIELD: "1"} if offset == len(frames) - 1 else {FRAME_FIELD: frame}
            await client.xadd(log_key(run_id), fields, id=f"{seq + offset}-0")
        await client.expire(log_key(run_id), _retain_sec())
    except RedisError as exc:  # e.g. the owner was alive after all and wrote a later id
        logger.warning("closing the Redis log of run {} failed: {}", run_id, exc)


def _entries_text(entries) -> tuple[str, int, bool]:
    frames, cursor, ended = [], 0, False
    for entry_id, fields in entries:
        cursor = int(entry_id.split("-")[0])
        frames.append(fields.get(FRAME_FIELD, ""))
        ended = ended or END_FIELD in fields
    return "".join(frames), cursor, ended


async def log_replay(client: Redis, run_id, *, after: int) -> tuple[str, int, bool]:
    """What the log holds after seq `after`: (frames text, last seq, whether it holds the end)."""
    entries = await client.xrange(log_key(run_id), min=f"({after}-0" if after > 0 else "-", max="+")
    return _entries_text(entries)


async def log_read(client: Redis, run_id, *, after: int, block_sec: float) -> tuple[str, int, bool]:
    """The entries after seq `after`, waiting up to `block_sec` for the first: (frames text, last
    seq, whether the end was among them); ("", after, False) after that much silence."""
    answer = await client.xread({log_key(run_id): f"{after}-0"}, count=1000, block=max(int(block_sec * 1000), 1))
    if not answer:
        return "", after, False
    return _entries_text(answer[0][1])


async def control_publish(client: Redis, *, op: str, run_id) -> None:
    await client.publish(CONTROL_CHANNEL, json.dumps({"op": op, "run": str(run_id)}))


async def control_listen(client: Redis, on_message) -> None:
    """Calls `on_message(op, run_id)` for every control message, until cancelled; resubscribes
    after a lost connection."""
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CONTROL_CHANNEL)
            async for message in pubsub.listen():
                try:
                    body = json.loads(message["data"])
                    on_message(str(body["op"]), str(body["run"]))
                except (ValueError, KeyError, TypeError):
                    logger.warning("ignored a malformed run control message")
        except RedisError as exc:
            logger.warning("run control channel lost ({}); resubscribing", exc)
            await asyncio.sleep(1.0)
        finally:
            try:
                await pubsub.aclose()
            except RedisError:
                pass
