"""asyncio support for hipfile.Future (``await f.pread(...)``)."""

import asyncio


def _settle(aio_future, hf):
    if aio_future.cancelled():
        return
    try:
        aio_future.set_result(hf.result())
    except BaseException as e:  # the transfer's error goes to the awaiting task
        aio_future.set_exception(e)


def awaitable(hf):
    """The iterator ``Future.__await__`` returns: an asyncio future of the
    running loop, settled on that loop once the transfer has finished."""
    loop = asyncio.get_running_loop()
    aio_future = loop.create_future()
    hf.add_done_callback(lambda f: loop.call_soon_threadsafe(_settle, aio_future, f))
    return aio_future.__await__()
