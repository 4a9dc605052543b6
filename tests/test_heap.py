"""freeze_startup_heap (trtkit.heap): what startup built is out of the collector's walk; what comes later is not."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
import weakref
from trtkit.heap import freeze_startup_heap

built_at_startup = [[i] for i in range(1000)]
class Node:
    pass
garbage = Node()
garbage.itself = garbage  # a cycle only a collection frees
gone = weakref.ref(garbage)
del garbage
frozen = freeze_startup_heap()
assert gone() is None  # collected first, not frozen for the process's life
made_later = [[]]
walked = {id(o) for o in gc.get_objects()}
assert frozen == gc.get_freeze_count() and frozen > 1000, frozen
assert id(built_at_startup) not in walked and id(built_at_startup[0]) not in walked
assert id(made_later) in walked
gc.unfreeze()
assert id(built_at_startup) in {id(o) for o in gc.get_objects()}
print("ok", frozen)
"""


def test_startup_objects_leave_the_collectors_walk_and_later_ones_stay() -> None:
    # in a fresh interpreter: freezing the test runner's own heap would change every later test's collections
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
