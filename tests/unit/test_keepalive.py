import gc
import weakref

from python_backends.keepalive import KeepAlive


class Item:
    pass


def test_an_item_is_held_for_its_time_then_freed_by_a_later_keep():
    now = [0.0]
    held = KeepAlive(10.0, clock=lambda: now[0])
    first = Item()
    gone = weakref.ref(first)
    held.keep(first)
    del first
    now[0] = 9.0
    held.keep(Item())
    gc.collect()
    assert gone() is not None and len(held) == 2  # 9 s: still held
    now[0] = 10.5
    held.keep(Item())
    gc.collect()
    assert gone() is None and len(held) == 2  # past 10 s: dropped, the younger kept
