"""A load balancer's view of a server under attack: /healthz asked again and again, from a
process of its own (in the test's process its HTTP client would wait for the GIL like the
server), each answer's latency kept."""

import subprocess
import sys
import threading

PROBER = """
import sys, time, httpx
with httpx.Client(base_url=sys.argv[1], timeout=30) as client:
    print("ready", flush=True)
    while not sys.stdin.closed:
        started = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        print(time.perf_counter() - started, flush=True)
        time.sleep(0.01)
"""


class HealthProber:
    """`with HealthProber(base) as prober:` starts asking (it returns once the server answered
    once) and stops at the block's end; `prober.latencies` are the seconds each answer took."""

    def __init__(self, base: str):
        self.process = subprocess.Popen([sys.executable, "-c", PROBER, base], stdout=subprocess.PIPE, text=True)
        self.latencies: list[float] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._first = threading.Event()

    def _read(self):
        for line in self.process.stdout:
            if line.strip() == "ready":
                continue
            self.latencies.append(float(line))
            self._first.set()

    def start(self):
        self._reader.start()
        assert self._first.wait(30), "the prober never got an answer"

    def stop(self):
        self.process.kill()
        self.process.wait(10)
        self._reader.join(10)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
