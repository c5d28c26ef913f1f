"""ferry.functions.async_execution, as torch.distributed.rpc.functions has it."""


def async_execution(fn):
    """Marks fn as answering later: it returns a Future (ferry's or torch's),
    and the call is answered with that Future's value once it completes, so
    the handler's thread is free meanwhile (nested RPCs, batching). The
    function object itself is returned, so it still pickles by reference."""
    fn._ferry_async_execution = True
    return fn
