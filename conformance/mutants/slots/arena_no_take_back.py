"""Fault arena_no_take_back: an enqueue that raises leaves its arena slots written.

Bug: when ``enqueue`` raises after a tensor was copied into an arena slot
(a later part of the message fails to pickle, or the ring's wait times
out), the slot stays written with every reader's flag unset; no reader
ever receives its stub, so nobody releases it and the arena loses the slot
for good (vLLM 0.33.0 behaves so).  Only the deployed construction sends
messages through ``enqueue``.

Must be caught by: PROG
Construction: deployed
"""

from shmspec.impl import broadcast as _b


class MessageQueue(_b.MessageQueue):
    def _take_back(self, written):
        pass  # BUG: the slots of a message never sent stay written
