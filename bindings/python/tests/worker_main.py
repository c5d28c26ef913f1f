"""A test worker process: python3 worker_main.py NAME STORE BACKEND.

Joins the job, prints READY, serves until remote_fns.stop() is called or
stdin closes, then leaves gracefully."""

import sys
import threading

import ferry
import remote_fns


def main():
    name, store, backend = sys.argv[1:4]
    ferry.init_rpc(name, backend=backend, store=store, peer_timeout=2.0)
    # stdin closing (the test process died) also ends the worker.
    threading.Thread(target=lambda: (sys.stdin.read(), remote_fns.STOP.set()),
                     daemon=True).start()
    print("READY", flush=True)
    remote_fns.STOP.wait()
    ferry.shutdown(graceful=True)


if __name__ == "__main__":
    main()
