"""Put-if-absent files: the one primitive the plan log and the local Delta log rely on.

The content goes to a temporary file in the same directory, is flushed to disk, and is
then hard-linked to its final name; ``link`` fails if the name exists, so a reader sees
either nothing or the complete content, and of two writers exactly one wins.
"""

from __future__ import annotations

import os
import tempfile


def put_if_absent(path: str, text: str) -> bool:
    """Write ``text`` at ``path`` unless something is there; True if this call wrote it."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-eod-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
