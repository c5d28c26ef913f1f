"""ferry.futures: torch.futures' functions for ferry's Futures.

`collect_all` and `wait_all` take ferry Futures, torch Futures, or both
mixed (anything with add_done_callback / wait), as torch.futures'
functions do for torch's; `Future` is ferry.Future. torch is never
imported here.
"""

import threading

from ._future import Future

__all__ = ["Future", "collect_all", "wait_all"]


def collect_all(futures):
    """A Future completed once every future in `futures` is done; its
    value is that list of futures (each one done, with its value or
    error), as torch.futures.collect_all."""
    futures = list(futures)
    combined = Future()
    if not futures:
        combined.set_result(futures)
        return combined
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            combined.set_result(futures)

    for f in futures:
        f.add_done_callback(one_done)
    return combined


def wait_all(futures, timeout=None):
    """Waits for the futures in order and returns their values; the first
    error (in list order) is raised, as torch.futures.wait_all. `timeout`
    (seconds, ferry's addition) bounds each ferry Future's wait."""
    # A ferry Future drives ferry's progress while it waits; a torch one
    # waits on torch's side (ferry's threads complete it).
    return [f.wait(timeout) if isinstance(f, Future) else f.wait() for f in futures]
