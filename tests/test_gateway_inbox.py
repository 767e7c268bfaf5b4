import asyncio

from gateway.inbox import Inbox, Mark


def take_until_close(inbox: Inbox, max_chars: int) -> list:
    async def run():
        taken = []
        while not taken or taken[-1] is not Mark.CLOSE:
            taken.append(await asyncio.wait_for(inbox.take(max_chars), 1))
        return taken

    return asyncio.run(run())


def test_batches_are_whole_sentences_within_the_limit_and_marks_keep_their_place():
    inbox = Inbox()
    inbox.put("a" * 10, "b" * 10, "c" * 10, Mark.FLUSH, "d" * 50, "e" * 5, Mark.CLOSE)
    assert inbox.chars == 85
    batches = take_until_close(inbox, 25)
    assert batches == [["a" * 10, "b" * 10], ["c" * 10], Mark.FLUSH, ["d" * 50], ["e" * 5], Mark.CLOSE]
    assert inbox.chars == 0


def test_take_waits_for_the_next_item():
    async def run():
        inbox = Inbox()
        waiting = asyncio.create_task(inbox.take(100))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        inbox.put("Hello.", "There.")
        return await waiting

    assert asyncio.run(run()) == ["Hello.", "There."]
