"""Run a test's probe in a forked child as another user (as nobody when we are root: root
writes through any mode bits, so read-only files are only honest for someone else) and
bring its JSON report back through a pipe."""
import json
import os

NOBODY = 65534


def honest_uid() -> int:
    """The user whose permissions a read-only test means: nobody for root, else ourselves."""
    return NOBODY if os.geteuid() == 0 else os.geteuid()


def in_child_as(uid: int, probe) -> dict:
    """probe() -> a JSON-able dict, run in a forked child that first drops to uid."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            if uid != os.geteuid():
                os.setgid(uid)
                os.setuid(uid)
            os.write(write_end, json.dumps(probe()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)
