"""A process forked while the local store holds a key's lock does not keep that key locked (issue 51).

An flock belongs to the open file, which a fork shares: a step's process forked by the inline
runner while a lease's renewal held its lock used to keep the key locked for as long as the step
ran, and that lease's next renewal waited as long (shown before the fix: a replace waited the 3 s a
forked child lived). Here the child lives until the test lets it go, so nothing depends on timing.
"""

from __future__ import annotations

import os
import threading

from executor.engine.store.local import LocalStore


def test_a_child_forked_while_a_lock_is_held_does_not_keep_the_key_locked(tmp_path):
    store = LocalStore(str(tmp_path))
    generation = store.create_if_absent("k", b"a")
    inside, leave = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with store._locked("k"):
            inside.set()
            leave.wait(timeout=30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert inside.wait(timeout=30)
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: alive until the test writes to the pipe (or closes it)
        os.close(release_w)
        os.read(release_r, 1)
        os._exit(0)
    os.close(release_r)
    writer = threading.Thread(target=lambda: None)
    try:
        leave.set()
        holder.join(timeout=30)
        answer: list = []
        writer = threading.Thread(target=lambda: answer.append(store.replace_if_generation("k", b"b", generation)))
        writer.start()
        writer.join(timeout=10)  # never near this: the write takes no lock anyone else holds
        assert answer and answer[0] is not None, "the write waited for the child forked under the lock"
        assert store.read("k").data == b"b"
    finally:
        os.close(release_w)  # the child ends
        os.waitpid(pid, 0)
        writer.join(timeout=30)
